//! A count-down latch over the backend's records: Redisson's `RCountDownLatch`, Curator's
//! barriers. Any process sets the count, any process counts down, and waiters are let through
//! when the count reaches zero.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::backend::{Backoff, Record, RecordOp};
use crate::{LockError, Locker, Result, validate_key, validate_wait};

/// Suffix of a latch's record key: `{name}#latch`.
const LATCH_SUFFIX: &str = "#latch";
/// A waiter on a store without notifications looks again at least this often, and at most
/// [`POLL_MAX`] apart.
const POLL_MIN: Duration = Duration::from_millis(5);
const POLL_MAX: Duration = Duration::from_millis(200);

/// A count-down latch named `name`, shared by every process that uses the name on the same
/// backend.
///
/// The latch is a record on the server (`{name}#latch`, [`Capability::records`](crate::Capability)):
/// the count it was set to and one mark per [`count_down`](Self::count_down) call, each with a
/// token of its own, so a count-down the driver sends twice still counts once. It is open when
/// no count is set or every count was counted down. The record outlives every process until
/// [`delete`](Self::delete). A waiter is woken by the store's notification where it has one
/// (memory, Redis) and looks again at most 200 ms apart in any case.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lock_core::LockError> {
/// use std::{sync::Arc, time::Duration};
/// use lock_core::{CountDownLatch, Locker, MemoryBackend};
///
/// let locker = Locker::new(Arc::new(MemoryBackend::new()));
/// let ready = CountDownLatch::new(&locker, "workers-ready")?;
/// assert_eq!(ready.set_count(2).await?, 2);
/// ready.count_down().await?;
/// assert_eq!(ready.count().await?, 1);
/// ready.count_down().await?;
/// ready.wait(Duration::from_secs(1)).await?;
/// ready.delete().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct CountDownLatch {
    locker: Locker,
    name: Arc<str>,
    key: Arc<str>,
}

impl fmt::Debug for CountDownLatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CountDownLatch")
            .field("backend", &self.locker.backend().name())
            .field("name", &self.name)
            .finish()
    }
}

/// What is left to count down in `record`.
fn remaining(record: Record) -> u64 {
    record.value.map_or(0, |v| v.saturating_sub(record.marks))
}

impl CountDownLatch {
    /// The latch `name` over `locker`'s backend.
    ///
    /// # Errors
    /// [`LockError::Unsupported`] when the backend keeps no records; [`LockError::InvalidKey`]
    /// for a name that is not a valid key once suffixed.
    pub fn new(locker: &Locker, name: impl Into<String>) -> Result<Self> {
        let name: String = name.into();
        let key = format!("{name}{LATCH_SUFFIX}");
        validate_key(&name)?;
        validate_key(&key)?;
        let backend = locker.backend();
        if !backend.capabilities().records {
            return Err(LockError::Unsupported { backend: backend.name(), what: "count-down latches" });
        }
        Ok(CountDownLatch { locker: locker.clone(), name: name.into(), key: key.into() })
    }

    /// The name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The record key on the server (`{name}#latch`).
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Set the count to `count` unless a round is running (Redisson's `trySetCount`; a finished
    /// round is replaced), and answer the count in effect: `count` when this call set it.
    ///
    /// # Errors
    /// [`LockError::InvalidConfig`] for a count of 0; backend errors.
    pub async fn set_count(&self, count: u64) -> Result<u64> {
        if count == 0 {
            return Err(LockError::InvalidConfig { reason: "a latch's count must be at least 1".to_owned() });
        }
        let backend = self.locker.backend();
        let mut record = backend.record(&self.key, RecordOp::Init(count)).await?;
        if record.value.is_some() && remaining(record) == 0 {
            // A finished round is replaced (two callers racing here may both start one: the
            // later one's count then stands).
            backend.record(&self.key, RecordOp::Delete).await?;
            record = backend.record(&self.key, RecordOp::Init(count)).await?;
        }
        Ok(record.value.unwrap_or(count))
    }

    /// Count down once (nothing when no count is set, or it is at zero already) and answer
    /// what is left.
    ///
    /// # Errors
    /// Backend errors: the count-down may or may not have been applied; calling again counts
    /// again.
    pub async fn count_down(&self) -> Result<u64> {
        let token = uuid::Uuid::new_v4().simple().to_string();
        let record = self.locker.backend().record(&self.key, RecordOp::Mark(&token)).await?;
        Ok(remaining(record))
    }

    /// What is left to count down (0 when open).
    ///
    /// # Errors
    /// Backend errors.
    pub async fn count(&self) -> Result<u64> {
        Ok(remaining(self.locker.backend().record(&self.key, RecordOp::Get).await?))
    }

    /// Wait until the count reaches zero, at most `timeout`.
    ///
    /// # Errors
    /// [`LockError::Timeout`] (naming the latch) when it is still counting at the deadline;
    /// [`LockError::InvalidWait`] for a timeout out of range; backend errors.
    pub async fn wait(&self, timeout: Duration) -> Result<()> {
        validate_wait(timeout)?;
        let started = Instant::now();
        let deadline = started + timeout;
        let backend = self.locker.backend();
        // Subscribed before each look, so a count-down between the look and the wait wakes it.
        let mut sub = backend.subscribe(&self.key).await?;
        let mut backoff = Backoff::new(POLL_MIN, POLL_MAX);
        loop {
            if self.count().await? == 0 {
                return Ok(());
            }
            // The notification wakes it early; the pause bounds a notification that is lost.
            let pause = backoff.next_delay();
            let woke = async {
                match sub.as_mut() {
                    Some(s) => tokio::select! {
                        live = s.notified() => live,
                        () = tokio::time::sleep(pause) => true,
                    },
                    None => {
                        tokio::time::sleep(pause).await;
                        true
                    }
                }
            };
            match tokio::time::timeout_at(deadline, woke).await {
                Ok(true) => {}
                Ok(false) => sub = None,
                Err(_) if self.count().await? == 0 => return Ok(()),
                Err(_) => {
                    return Err(LockError::Timeout { key: self.name.to_string(), waited: started.elapsed() });
                }
            }
        }
    }

    /// Remove the latch's record: the count and every count-down. It is open afterwards, and
    /// [`set_count`](Self::set_count) starts a new round.
    ///
    /// # Errors
    /// Backend errors.
    pub async fn delete(&self) -> Result<()> {
        self.locker.backend().record(&self.key, RecordOp::Delete).await.map(|_| ())
    }
}
