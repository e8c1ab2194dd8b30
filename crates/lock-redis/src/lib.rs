#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![warn(missing_debug_implementations)]

mod backend;
mod builder;
mod error;
mod keys;
mod notify;
mod scripts;

pub use backend::RedisLock;
pub use builder::{
    DEFAULT_CONNECTION_TIMEOUT, DEFAULT_FAIR_WAITER_TIMEOUT, DEFAULT_RESPONSE_TIMEOUT, Mode, RedisLockBuilder,
};
pub use keys::{DEFAULT_KEY_PREFIX, KeyNames};
/// The driver, re-exported so callers name the same version (and can downcast error sources).
pub use redis;

#[cfg(test)]
mod tests {
    #[test]
    fn public_types_are_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<super::RedisLock>();
        check::<super::RedisLockBuilder>();
    }
}
