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

/// Entry points for the fuzz targets under `fuzz/` (feature `fuzzing`); not a stable API.
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing {
    /// Every Redis name of lock `key` under `prefix` (lock, fence, queue, waiters, channel).
    pub fn names(prefix: &str, key: &str) -> [String; 5] {
        let n = crate::keys::KeyLayout::new(prefix.to_owned()).names(key);
        [n.lock, n.fence, n.queue, n.waiters, n.channel]
    }

    /// The lock key a pub/sub channel name (as the server sends it) stands for.
    pub fn key_of_channel(prefix: &str, channel: &str) -> Option<String> {
        crate::keys::KeyLayout::new(prefix.to_owned()).key_of_channel(channel)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn public_types_are_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<super::RedisLock>();
        check::<super::RedisLockBuilder>();
    }
}
