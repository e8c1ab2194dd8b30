//! The testing side of lock-nats, kept next to it (`crates/lock-nats/testing`, unpublished:
//! it depends on the unpublished test kit, which a published crate cannot): a private
//! `nats-server` with JetStream on a free loopback port ([`NatsServer`], with lock-testkit's
//! process, watchdog and fault hooks: kill, restart keeping its store, SIGSTOP pause), the
//! server shared by one test binary ([`shared`]), and the conformance suite's [`Factory`]
//! ([`NatsFactory`], clients direct or each behind a proxy of its own to cut).
//!
//! Not for production: the store's tests, the workspace's and the bench use it.
//!
//! [`Factory`]: lock_testkit::Factory
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod factory;
mod floor;
mod server;
mod side;

pub use factory::NatsFactory;
pub use server::{ENV_URL, NatsServer, shared, try_shared};
pub use side::Side;
