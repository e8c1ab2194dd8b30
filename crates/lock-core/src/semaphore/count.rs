//! The permit count stored with the semaphore where the store keeps records
//! ([`LockBackend::records`](crate::backend::LockBackend::records)): set by the first handle that takes a permit,
//! checked once by every other handle, changed for everyone only by [`Semaphore::resize`].

use std::time::Duration;

use tokio::time::Instant;

use super::{Semaphore, validate_permits};
use crate::backend::{Backoff, RecordOp};
use crate::{LockError, LockGuard, LockRequest, Result};

/// The first and the longest pause between retries of a count check that failed for a
/// temporary reason.
const CHECK_RETRY_MIN: Duration = Duration::from_millis(20);
const CHECK_RETRY_MAX: Duration = Duration::from_millis(500);

/// Suffix of the record that holds a semaphore's permit count: `{name}#s-n`. No longer than
/// the longest slot suffix (`#s255`), so every name the semaphore accepts has a valid one.
pub(super) const COUNT_SUFFIX: &str = "#s-n";

impl Semaphore {
    /// The key of the record holding the permit count (`{name}#s-n`; a read-write lock's
    /// reader slots: `{name}#rw-n`).
    pub fn count_key(&self) -> String {
        format!("{}{}", self.name, self.count_suffix)
    }

    /// The same slots with their count stored under `{name}{suffix}` and checked as a
    /// semaphore's (a read-write lock's reader slots).
    pub(crate) fn counted_as(mut self, suffix: &'static str) -> Self {
        self.counted = true;
        self.count_suffix = suffix;
        self
    }

    /// The permit count stored with the semaphore: `None` when no handle stored one yet, or
    /// when the store keeps no records.
    ///
    /// # Errors
    /// Backend errors.
    pub async fn stored_permits(&self) -> Result<Option<u64>> {
        let backend = self.locker.backend();
        if backend.records().is_none() {
            return Ok(None);
        }
        Ok(backend.record(&self.count_key(), RecordOp::Get).await?.value)
    }

    /// Change the permit count for every handle: store `permits` with the semaphore and use it
    /// in this handle. Other handles built with the old count are then refused with
    /// [`LockError::PermitsMismatch`] once they check (a handle checks at its first
    /// acquisition; one that checked before keeps its count, see "Changing the permit count").
    /// On a store without records only this handle changes.
    ///
    /// # Errors
    /// [`LockError::InvalidConfig`] when `permits` is 0 or over
    /// [`MAX_PERMITS`](crate::MAX_PERMITS); backend errors.
    pub async fn resize(&mut self, permits: u32) -> Result<()> {
        validate_permits(permits, "the number of permits")?;
        let backend = self.locker.backend();
        if backend.records().is_some() {
            backend.record(&self.count_key(), RecordOp::Set(u64::from(permits))).await?;
        }
        self.permits = permits;
        self.checked = std::sync::Arc::new(std::sync::OnceLock::from(()));
        Ok(())
    }

    /// The first attempt of an acquisition (`req`: on a slot, or on the pool), sent only once
    /// the count check (a round trip at a handle's first acquisition only) has answered: a
    /// handle whose count disagrees never obtains a hold, not even one it would give back, since
    /// meanwhile it would hold a permit beyond the stored count. A waiting acquisition retries
    /// a check that failed for a temporary reason until its deadline (see `check_count_by`).
    pub(super) async fn checked_attempt(
        &self,
        req: LockRequest<'_>,
        once: bool,
        deadline: Option<Instant>,
    ) -> Result<Option<LockGuard>> {
        self.check_count_by(once, deadline).await?;
        req.try_acquire().await
    }

    /// [`check_count`](Self::check_count), retried after a temporary error until `deadline`
    /// unless `once`, as an acquisition retries its attempts: a record read that a busy store
    /// answered too late fails a try, not a wait with time left.
    pub(crate) async fn check_count_by(&self, once: bool, deadline: Option<Instant>) -> Result<()> {
        let mut backoff = Backoff::new(CHECK_RETRY_MIN, CHECK_RETRY_MAX);
        loop {
            match self.check_count().await {
                Err(e) if e.is_temporary() && !once && deadline.is_none_or(|d| Instant::now() < d) => {
                    tracing::debug!(semaphore = %self.name, error = %e, "count check failed; retrying");
                    let nap = Instant::now() + backoff.next_delay();
                    tokio::time::sleep_until(deadline.map_or(nap, |d| d.min(nap))).await;
                }
                other => return other,
            }
        }
    }

    /// Whether the count needs no check before this handle's next acquisition: checked, or not
    /// stored (a handle without a count, a store without records).
    pub(super) fn count_known(&self) -> bool {
        !self.counted || self.checked.get().is_some() || self.locker.backend().records().is_none()
    }

    /// Store this handle's count if none is stored, and refuse a handle that disagrees with
    /// the stored one; once per handle (and its clones).
    pub(super) async fn check_count(&self) -> Result<()> {
        if self.count_known() {
            return Ok(());
        }
        let backend = self.locker.backend();
        let asked = self.permits;
        let stored = backend.record(&self.count_key(), RecordOp::Init(u64::from(asked))).await?.value;
        match stored {
            Some(stored) if stored != u64::from(asked) => {
                Err(LockError::PermitsMismatch { name: self.name.to_string(), stored, asked })
            }
            _ => {
                self.checked.set(()).ok();
                Ok(())
            }
        }
    }
}
