#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(missing_docs)]
#![warn(missing_debug_implementations)]

mod backend;
mod builder;
mod error;
mod mode;
mod name;
mod named;
mod optimistic;
mod options;
mod pessimistic;
mod session;
mod session_mode;
mod sql;
mod waiters;
mod warm;

pub use backend::MySqlLock;
pub use builder::MySqlLockBuilder;
pub use name::{MAX_LOCK_NAME, lock_name};
pub use options::Mode;
pub use sql::{MAX_TABLE_NAME, validate_table_name};
/// The driver, re-exported so callers build pools and downcast error sources with one version.
pub use sqlx;
