//! The facade's suites on every store, one test binary with a module per store or concern:
//! linking one binary per file cost CI minutes, and each started its own servers. The history
//! checkers (`history`, `generative`) keep binaries of their own: CI runs them with more test
//! threads. `cargo test --all-features --test stores redis::` runs one module.

#[path = "../support/mod.rs"]
mod support;

mod blocking;
mod deadlines;
mod etcd;
mod mysql;
mod postgres;
mod redis;
mod redis_cluster;
mod redis_resend;
mod redis_sentinel;
mod redlock;
mod security;
mod servers;
mod zk;
