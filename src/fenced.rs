//! Fencing that reaches your data: the resource refuses a writer whose lock was lost and
//! taken again, by the [`FencingToken`](crate::FencingToken) of its guard.
//!
//! The rule ([`Watermark`], [`judge`]) and an in-process resource ([`Fenced`]) come from
//! [`lock_core::fenced`]; each store with a place for the watermark beside the user's data adds
//! its helper, by cargo feature:
//! - [`postgres::Fences`] and [`mysql::Fences`]: `admit(&mut tx, resource, fence)` in the
//!   transaction that makes the write;
//! - [`redis::set`] and [`redis::delete`]: the check and the write in one script.
//!
//! `examples/fenced_write.rs` pauses a holder past its lease, lets another take the lock and
//! write, and shows the paused holder's late write refused.

pub use lock_core::fenced::*;

#[cfg(feature = "mysql")]
#[cfg_attr(docsrs, doc(cfg(feature = "mysql")))]
pub use lock_mysql::fenced as mysql;
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use lock_postgres::fenced as postgres;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use lock_redis::fenced as redis;
