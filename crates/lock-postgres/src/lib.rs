#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(missing_docs)]
#![warn(missing_debug_implementations)]

mod backend;
mod builder;
mod error;
mod evict;
pub mod fenced;
mod keys;
mod options;
mod pinned;
mod pooler;
mod records;
mod session;
mod sql;
mod xact;

pub use backend::PgLock;
pub use builder::PgLockBuilder;
pub use keys::advisory_key;
pub use options::{MAX_TABLE_NAME, validate_table_name};
/// The driver, re-exported so callers build pools and downcast error sources with one version.
pub use sqlx;

/// PostgreSQL in the registry.
pub static DESCRIPTOR: lock_core::backend::registry::Descriptor = lock_core::backend::registry::Descriptor {
    name: "postgres",
    schemes: &["postgres", "postgresql"],
    urls: "`postgres://`, `postgresql://` (`?table=`, `keepalive=`)",
    summary: "PostgreSQL session advisory locks",
    connect: |url| Box::pin(async move { Ok(std::sync::Arc::new(PgLock::from_url(url).await?) as _) }),
    modes: &[],
    local: None,
    // A held lock pins one of the pool's connections.
    watchdog_locks: Some(24),
    session_lease: None,
};
