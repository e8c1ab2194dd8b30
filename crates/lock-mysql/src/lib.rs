#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(missing_docs)]
#![warn(missing_debug_implementations)]

mod backend;
mod builder;
mod error;
pub mod fenced;
mod keys;
mod mode;
mod named;
mod notify;
mod optimistic;
mod options;
mod pessimistic;
mod records;
mod session;
mod session_mode;
mod sql;

pub use backend::MySqlLock;
pub use builder::MySqlLockBuilder;
pub use keys::{MAX_LOCK_NAME, lock_name};
pub use options::Mode;
pub use sql::{MAX_TABLE_NAME, validate_table_name};
/// The driver, re-exported so callers build pools and downcast error sources with one version.
pub use sqlx;

/// MySQL / MariaDB in the registry.
pub static DESCRIPTOR: lock_core::backend::registry::Descriptor = lock_core::backend::registry::Descriptor {
    name: "mysql",
    schemes: &["mysql", "mariadb"],
    urls: "`mysql://`, `mariadb://` (`?mode=pessimistic\\|optimistic\\|get_lock`)",
    summary: "MySQL / MariaDB: row locks, an optimistic lease row judged by the server's clock, or `GET_LOCK`",
    connect: |url| Box::pin(async move { Ok(std::sync::Arc::new(MySqlLock::from_url(url).await?) as _) }),
    modes: &["pessimistic", "optimistic", "get_lock"],
    local: None,
    // A held pessimistic or GET_LOCK lock pins one of the pool's connections; an optimistic
    // hold is an InnoDB commit each: leave the watchdog's renewals room.
    watchdog_locks: Some(24),
    session_lease: None,
};
