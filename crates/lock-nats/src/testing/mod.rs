//! The testing side of this store, kept in its crate (feature `testing`): a private
//! `nats-server` with JetStream on a free loopback port ([`NatsServer`], with lock-testkit's
//! process, watchdog and fault hooks: kill, restart keeping its store, SIGSTOP pause), the
//! server shared by one test binary ([`shared`]), and the conformance suite's [`Factory`]
//! ([`NatsFactory`], clients direct or each behind a proxy of its own to cut).
//!
//! Not for production: a store's tests, the workspace's and the bench use it.
//!
//! [`Factory`]: lock_testkit::Factory

mod factory;
mod server;

pub use factory::NatsFactory;
pub use server::{ENV_URL, NatsServer, shared, try_shared};
