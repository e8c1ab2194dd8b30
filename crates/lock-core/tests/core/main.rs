//! lock-core's integration tests, one binary with a module per concern: linking one binary per
//! file cost CI minutes. `cargo test -p lock-core --test core
//! <module>::` runs one concern.

mod late_grant;
mod memory_turns;
mod queue;
mod quorum;
mod rw_slots;
mod starved;
mod watchdog;
mod watchdog_scale;
