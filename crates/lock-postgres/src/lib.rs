#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(missing_docs)]
#![warn(missing_debug_implementations)]

mod backend;
mod builder;
mod error;
mod key;
mod options;
mod pinned;
mod session;
mod sql;

pub use backend::PgLock;
pub use builder::PgLockBuilder;
pub use key::advisory_key;
pub use options::{MAX_TABLE_NAME, validate_table_name};
/// The driver, re-exported so callers build pools and downcast error sources with one version.
pub use sqlx;
