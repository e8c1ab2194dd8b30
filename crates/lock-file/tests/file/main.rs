//! lock-file's integration tests, one binary with a module per concern: linking one binary per
//! file cost CI minutes, and each started its own servers. `cargo test -p lock-file --test file
//! <module>::` runs one concern.

mod conformance;
mod fifo;
mod generative;
mod layout;
mod removals;
mod wakeups;
