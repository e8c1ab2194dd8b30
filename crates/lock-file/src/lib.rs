#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(missing_docs)]
#![warn(missing_debug_implementations)]

mod backend;
mod driver;
mod files;
mod names;

pub use backend::{DEFAULT_CHECK_EVERY, FileLock};

/// The name of `key`'s lock file in the lock directory (what an operator removes to take a
/// lock away from its holder, whose lost signal then fires).
pub fn lock_file_name(key: &str) -> String {
    format!("{}.lock", names::stem(key))
}

/// The backend's name in errors and metrics.
const NAME: &str = "file";
