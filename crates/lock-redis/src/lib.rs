#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(missing_docs)]
#![warn(missing_debug_implementations)]

mod backend;
mod builder;
mod call;
mod conn;
mod error;
pub mod fenced;
mod handoffs;
mod keys;
#[cfg(test)]
mod model;
mod notify;
mod options;
mod prelude;
pub mod redlock;
mod replica;
mod scripts;
mod target;
mod topology;

pub use backend::RedisLock;
pub use builder::{
    DEFAULT_CONNECTION_TIMEOUT, DEFAULT_FAIR_WAITER_TIMEOUT, DEFAULT_INTEROP_POLL, DEFAULT_RESPONSE_TIMEOUT,
    RedisLockBuilder,
};
pub use conn::RedisConnection;
/// Entry points for the fuzz targets under `fuzz/` (feature `fuzzing`); not a stable API.
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub use keys::fuzzing;
pub use keys::{DEFAULT_KEY_PREFIX, KeyNames};
pub use options::Mode;
/// The driver, re-exported so callers name the same version (and can downcast error sources).
pub use redis;
pub use replica::{DEFAULT_REPLICA_ACK_TIMEOUT, ReplicasNotAcknowledged};

/// Redis in the registry: one server, a Cluster, the primary Sentinel names, or Redlock over
/// independent masters.
pub static DESCRIPTOR: lock_core::backend::registry::Descriptor = lock_core::backend::registry::Descriptor {
    name: "redis",
    schemes: &["redis", "rediss", "redis+cluster", "rediss+cluster", "redis+sentinel", "redlock"],
    urls: "`redis://`, `rediss://` (`?mode=simple\\|reentrant\\|fair\\|redis-py\\|python-redis-lock`, `key_prefix=`); \
           `redis+cluster://[user:pw@]h1:p1,h2:p2` (`rediss+cluster://`); \
           `redis+sentinel://[user:pw@]s1:p1,s2:p2/master-name[/db]`; \
           `redlock://[user:pw@]h1:p1,h2:p2,h3:p3[/db]` (`?mode=simple\\|reentrant`)",
    summary: "Redis: one server, a Cluster, the primary a Sentinel names (followed across a failover), \
              or Redlock over independent masters",
    connect: |url| {
        Box::pin(async move {
            let redlock = url.get(..10).is_some_and(|s| s.eq_ignore_ascii_case("redlock://"));
            Ok(if redlock {
                std::sync::Arc::new(redlock::connect(url).await?) as _
            } else {
                std::sync::Arc::new(RedisLock::from_url(url).await?) as _
            })
        })
    },
    modes: &["simple", "reentrant", "fair"],
    local: None,
    watchdog_locks: None,
    session_lease: None,
};
