//! lock-redis's integration tests, one binary with a module per concern: linking one binary per
//! file cost CI minutes, and each started its own servers. `cargo test -p lock-redis --test redis
//! <module>::` runs one concern.

mod common;

mod bookkeeping;
mod evict_interop;
mod faults;
mod fenced;
mod handover_safety;
mod interop;
mod notes;
mod phase_fair;
mod replica_ack;
mod wakeups;
