#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(missing_docs)]
#![warn(missing_debug_implementations)]

mod backend;
mod builder;
mod conn;
mod error;
mod handoffs;
mod keys;
mod notify;
mod options;
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
