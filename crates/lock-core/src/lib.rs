//! Distributed locks with fencing tokens and a lost-lock signal: the user API ([`Locker`],
//! [`LockGuard`], [`MultiLock`]), waiting with notifications and backoff, the watchdog that
//! renews leases, an in-memory backend and a Redlock-style quorum over other backends.
//!
//! Backend authors find the trait and the shared toolkit in [`backend`].
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), lock_core::LockError> {
//! use std::{sync::Arc, time::Duration};
//! use lock_core::{Locker, MemoryBackend};
//!
//! let locker = Locker::new(Arc::new(MemoryBackend::new()));
//! let guard = locker.lock("orders/42").wait(Duration::from_secs(1)).acquire().await?;
//! // Hand guard.fence() to the protected resource; select on guard.lost() while working.
//! assert!(locker.try_lock("orders/42").await?.is_none());
//! guard.release().await?;
//! # Ok(()) }
//! ```
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(missing_docs)]
#![warn(missing_debug_implementations)]

pub mod backend;
mod caller;
mod deadline;
mod error;
pub mod faults;
pub mod fenced;
mod guard;
mod hold;
mod latch;
mod leader;
mod locker;
#[cfg(feature = "memory")]
mod memory;
#[cfg(test)]
mod model_kit;
mod multi;
pub mod observe;
mod parts;
mod quorum;
mod renewer;
mod rwlock;
mod semaphore;
mod signal;
mod token;
mod validate;

pub use backend::{Capability, LockBackend, LockInfo, settle_cleanups};
pub use deadline::GRACE as DEADLINE_GRACE;
pub use error::{BoxError, LockError, Result, is_tls_refusal};
pub use guard::LockGuard;
pub use latch::CountDownLatch;
pub use leader::{Candidate, LeaderElection, Leadership};
pub use locker::{DRIFT_MARGIN_FLOOR, DRIFT_MARGIN_RATE, LockRequest, Locker, drift_margin};
#[cfg(feature = "memory")]
pub use memory::MemoryBackend;
pub use multi::{MultiGuard, MultiLock};
pub use quorum::{
    DRIFT_FLOOR, MEMBER_TIMEOUT_MAX, MEMBER_TIMEOUT_MIN, QuorumBackend, default_member_timeout,
    drift_allowance,
};
pub use rwlock::{
    DEFAULT_READER_SLOTS, ReadGuard, ReadRequest, RwLock, UpgradeableReadGuard, UpgradeableRequest,
    WriteGuard, WriteRequest,
};
pub use semaphore::{MAX_PERMITS, Permit, PermitRequest, Permits, Semaphore};
pub use signal::{LeaseSignal, LeaseState, LostReason};
pub use token::{FencingToken, OwnerToken};
pub use validate::{
    DEFAULT_WATCHDOG_LEASE, MAX_KEY_BYTES, MAX_LEASE, MAX_WAIT, MIN_LEASE, validate_key, validate_lease,
    validate_note, validate_wait,
};

/// Re-exported so backends and users name one version.
pub use async_trait::async_trait;
pub use tokio_util::sync::CancellationToken;
