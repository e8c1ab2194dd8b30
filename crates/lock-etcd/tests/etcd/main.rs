//! lock-etcd's integration tests, one binary with a module per concern: linking one binary per
//! file cost CI minutes, and each started its own servers. `cargo test -p lock-etcd --test etcd
//! <module>::` runs one concern.

mod common;

mod cancel;
mod faults;
mod notes;
mod rwlock;
mod waiting;
mod watch;
