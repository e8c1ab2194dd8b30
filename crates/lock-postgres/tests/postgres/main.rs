//! lock-postgres's integration tests, one binary with a module per concern: linking one binary per
//! file cost CI minutes, and each started its own servers. `cargo test -p lock-postgres --test postgres
//! <module>::` runs one concern.

mod common;

mod bounds;
mod faults;
mod fenced;
mod hygiene;
mod notes;
mod pgbouncer;
mod pgbouncer_busy;
mod round_trips;
mod slow_link;
mod transaction;
mod unfenced;
