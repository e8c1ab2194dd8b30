#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(missing_docs)]
#![warn(missing_debug_implementations)]

mod backend;
mod builder;
mod cleanup;
mod config;
mod contenders;
mod error;
mod keys;
mod nodelay;
mod note;
mod options;
mod permits;
mod queue;
mod recipe;
mod records;
mod release;
mod session;
#[cfg(feature = "tls")]
mod tls;
mod waiting;

pub use backend::ZkLock;
pub use builder::{DEFAULT_ROOT, DEFAULT_SESSION_TIMEOUT, ZkLockBuilder};
pub use error::SessionEnded;
pub use keys::encode_key;
pub use waiting::{DEAD_WAITER_AFTER, WAITER_HEARTBEAT};
/// Test hooks (feature `testing`, not for production): the data of a waiting lock node and of a
/// claimed one, for tests that stand in for a waiter.
#[cfg(feature = "testing")]
pub use waiting::{HELD_DATA, WAITING_DATA};
/// The ZooKeeper client this backend is built on, so error sources can be downcast and tests
/// can talk to the server with the same version.
pub use zookeeper_client;

/// ZooKeeper in the registry.
pub static DESCRIPTOR: lock_core::backend::registry::Descriptor = lock_core::backend::registry::Descriptor {
    name: "zk",
    schemes: &["zk", "zookeeper", "zks"],
    urls: "`zk://host:port[,host:port]/root` (`zookeeper://`; `zks://…?ca=/path/ca.pem` over TLS, feature `zk-tls`)",
    summary: "ZooKeeper: ephemeral sequential nodes, each waiter watching its predecessor",
    connect: |url| {
        Box::pin(async move { Ok(std::sync::Arc::new(ZkLock::builder().url(url).build().await?) as _) })
    },
    modes: &[],
    local: None,
    // Holds live as long as the session, but renewing one checks its node: 10k holds cost the
    // client ~210 ms of CPU per period (docs/BENCH.md), so 100k would not fit in a period.
    watchdog_locks: Some(10_000),
    session_lease: Some(lock_core::backend::registry::SessionLease {
        option: "session_timeout",
        floor: "ZooKeeper raises it to 2 x its tickTime (4 s by default)",
    }),
};
