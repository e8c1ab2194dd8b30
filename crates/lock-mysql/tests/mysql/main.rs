//! lock-mysql's integration tests, one binary with a module per concern: linking one binary per
//! file cost CI minutes, and each started its own servers. `cargo test -p lock-mysql --test mysql
//! <module>::` runs one concern.

mod common;

mod bounds;
mod evict;
mod faults;
mod fenced;
mod fences;
mod interop;
mod new_keys;
mod notes;
mod round_trips;
mod runtime_gone;
mod slow_link;
mod wait_cancel;
