//! lock-zk's integration tests, one binary with a module per concern: linking one binary per
//! file cost CI minutes, and each started its own servers. `cargo test -p lock-zk --test zk
//! <module>::` runs one concern.

mod common;

mod dead_waiters;
mod faults;
mod interop;
mod interop_rw;
mod interop_sem;
mod notes;
mod tls;
mod user_client;
