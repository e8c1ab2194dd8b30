//! `dlock`: distributed locks with fencing tokens and a lost-lock signal on every backend.
//!
//! This facade re-exports [`lock_core`] and, by cargo feature, the backend crates: `memory`
//! (default), `redis`, `mysql`, `postgres`, `zk`, `etcd`, `file` (`full` = all). [`from_url`]
//! picks a store at run time from the registered ones ([`stores`]).
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), dlock::LockError> {
//! use std::time::Duration;
//! let locker = dlock::Locker::new(dlock::from_url("memory://doc").await?);
//! let guard = locker.lock("job/7").wait(Duration::from_secs(1)).acquire().await?;
//! println!("fencing token {:?}", guard.fence());
//! guard.release().await?;
//! # Ok(()) }
//! ```
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(missing_docs)]
#![warn(missing_debug_implementations)]

use std::sync::Arc;

pub use lock_core::*;

#[cfg(feature = "blocking")]
pub mod blocking;
#[cfg(feature = "serde")]
mod config;
pub mod fenced;
mod registry;
#[cfg(feature = "memory")]
pub mod testing;
mod url;

#[cfg(feature = "serde")]
pub use config::{ClockDrift, LockConfig, PollBounds};

pub use registry::*;
pub use url::{from_url, redact_url};

/// The README's Rust examples run as doctests (with every feature: they use several).
#[cfg(all(doctest, feature = "full"))]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

/// A backend chosen at run time.
pub type DynBackend = Arc<dyn LockBackend>;
