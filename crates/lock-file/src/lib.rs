#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(missing_docs)]
#![warn(missing_debug_implementations)]

mod backend;
mod driver;
mod evict;
mod files;
mod flock;
mod keys;
mod notify;
mod queue;
mod records;
mod turn;

pub use backend::{DEFAULT_CHECK_EVERY, FileLock};

/// The name of `key`'s lock file in the lock directory: the key itself where it is made of
/// `[A-Za-z0-9_-]`, so that `flock(1)` on `<dir>/<key>` takes the same lock. Removing it takes
/// the lock away from its holder, whose lost signal then fires.
pub fn lock_file_name(key: &str) -> String {
    keys::stem(key)
}

/// The file store in the registry: `file:///absolute/dir`.
pub static DESCRIPTOR: lock_core::backend::registry::Descriptor = lock_core::backend::registry::Descriptor {
    name: NAME,
    schemes: &["file"],
    urls: "`file:///absolute/dir` (`?check_every=`, `?create=true`)",
    summary: "advisory file locks (`flock`) of one host, not on NFS",
    connect: |url| Box::pin(async move { Ok(std::sync::Arc::new(FileLock::from_url(url)?) as _) }),
    modes: &[],
    local: Some(|| {
        let dir = tempfile::Builder::new().prefix("dlock-file-").tempdir()?;
        Ok(lock_core::backend::registry::Local {
            url: format!("file://{}", dir.path().display()),
            keep: Box::new(dir),
        })
    }),
    // Every grant syncs its fence to disk (file, then directory).
    watchdog_locks: Some(1_000),
    session_lease: None,
};

/// The backend's name in errors and metrics.
const NAME: &str = "file";
