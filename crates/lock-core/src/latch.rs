//! A count-down latch over the backend's records: Redisson's `RCountDownLatch`, Curator's
//! barriers. Any process sets the count, any process counts down, and waiters are let through
//! when the count reaches zero.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::backend::{Backoff, Record, RecordOp};
use crate::parts::release_quietly;
use crate::{LockError, Locker, Result, validate_key, validate_wait};

/// Suffix of a latch's record key: `{name}#latch`.
const LATCH_SUFFIX: &str = "#latch";
/// A waiter on a store without notifications looks again at least this often, and at most
/// [`POLL_MAX`] apart.
const POLL_MIN: Duration = Duration::from_millis(5);
const POLL_MAX: Duration = Duration::from_millis(200);
/// How long a count-down sends its mark again after a temporary error: the mark may have been
/// applied with its answer lost, and only the same token makes the resend count once.
const RESEND_FOR: Duration = Duration::from_secs(2);
/// How often `set_count` sends its init while the record is found deleted under it.
const INIT_TRIES: usize = 10;
/// How long a `set_count` that replaces a finished round waits for another doing the same.
const RESTART_WAIT: Duration = Duration::from_secs(10);
/// How long past its deadline a wait's last look at the count may take: a count-down made just
/// before the deadline still lets the waiter through, and a store that does not answer delays
/// the timeout by no more than this.
const LAST_LOOK: Duration = Duration::from_millis(100);

/// A count-down latch named `name`, shared by every process that uses the name on the same
/// backend.
///
/// The latch is a record on the server (`{name}#latch`, [`LockBackend::records`](crate::backend::LockBackend::records)):
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
        if backend.records().is_none() {
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
        let record = self.init(count).await?;
        if remaining(record) == 0 {
            return self.restart(count).await;
        }
        Ok(record.value.unwrap_or(count))
    }

    /// Store `count` unless a number is stored, and answer the number stored. A store that
    /// reads its answer apart from the write (SQL) can find the record deleted in between, by a
    /// restart under way: the init is sent again until a number is seen.
    async fn init(&self, count: u64) -> Result<Record> {
        let backend = self.locker.backend();
        for _ in 0..INIT_TRIES {
            let record = backend.record(&self.key, RecordOp::Init(count)).await?;
            if record.value.is_some() {
                return Ok(record);
            }
        }
        Err(LockError::temporary(backend.name(), "the latch's count kept vanishing under set_count"))
    }

    /// Replace a finished round by one of `count`, holding the lock of the latch's key: two
    /// callers must not both replace it (the second's delete would take the first's new round
    /// and its count-downs), so the second finds the new round running and keeps it.
    async fn restart(&self, count: u64) -> Result<u64> {
        let guard = self.locker.lock(self.key.to_string()).wait(RESTART_WAIT).acquire().await?;
        let backend = self.locker.backend();
        let restarted = async {
            let record = backend.record(&self.key, RecordOp::Get).await?;
            if record.value.is_some() && remaining(record) > 0 {
                return Ok(record);
            }
            backend.record(&self.key, RecordOp::Delete).await?;
            self.init(count).await
        }
        .await;
        release_quietly("a latch's restart lock", guard.release()).await;
        Ok(restarted?.value.unwrap_or(count))
    }

    /// Count down once (nothing when no count is set, or it is at zero already) and answer
    /// what is left. A temporary error (a lost connection, whose request may have been
    /// applied) is retried with the same mark for up to 2 s, so it still counts once; the
    /// call answers within those 2 s whatever the store does.
    ///
    /// # Errors
    /// [`LockError::Timeout`] (naming the latch) when the store did not answer within the 2 s;
    /// backend errors once the retries are over. Either way the count-down may or may not have
    /// been applied; calling again counts again.
    pub async fn count_down(&self) -> Result<u64> {
        let token = uuid::Uuid::new_v4().simple().to_string();
        let backend = self.locker.backend();
        let started = Instant::now();
        let until = started + RESEND_FOR;
        let mut backoff = Backoff::new(POLL_MIN, POLL_MAX);
        loop {
            // Bounded by the resends' end: a store that does not answer is not waited for by
            // its own timeouts (a pool's checkout, a client's request timeout: seconds).
            let sent =
                tokio::time::timeout_at(until, backend.record(&self.key, RecordOp::Mark(&token))).await;
            match sent {
                Ok(Ok(record)) => return Ok(remaining(record)),
                Ok(Err(e)) if e.is_temporary() => {
                    let next = Instant::now() + backoff.next_delay();
                    if next >= until {
                        return Err(e);
                    }
                    tracing::debug!(error = %e, latch = %self.name, "count-down not answered; sending its mark again");
                    tokio::time::sleep_until(next).await;
                }
                Ok(Err(e)) => return Err(e),
                Err(_) => {
                    return Err(LockError::Timeout { key: self.name.to_string(), waited: started.elapsed() });
                }
            }
        }
    }

    /// What is left to count down (0 when open).
    ///
    /// # Errors
    /// Backend errors.
    pub async fn count(&self) -> Result<u64> {
        Ok(remaining(self.locker.backend().record(&self.key, RecordOp::Get).await?))
    }

    /// Wait until the count reaches zero, at most `timeout`: the call answers by the deadline
    /// plus 100 ms (its last look at the count) whatever the store does. Temporary errors
    /// (a lost connection, a request the store did not answer) are retried until the deadline.
    ///
    /// # Errors
    /// [`LockError::Timeout`] (naming the latch) when it is still counting at the deadline, or
    /// the store did not answer by then; [`LockError::InvalidWait`] for a timeout out of range;
    /// permanent backend errors.
    pub async fn wait(&self, timeout: Duration) -> Result<()> {
        validate_wait(timeout)?;
        let started = Instant::now();
        // Every step (the subscription, each look, each pause) ends at the deadline.
        if let Ok(done) = tokio::time::timeout_at(started + timeout, self.wait_open()).await {
            return done;
        }
        match tokio::time::timeout(LAST_LOOK, self.count()).await {
            Ok(Ok(0)) => Ok(()),
            last => {
                if let Ok(Err(e)) = last {
                    tracing::debug!(error = %e, latch = %self.name, "the last look at the deadline failed");
                }
                Err(LockError::Timeout { key: self.name.to_string(), waited: started.elapsed() })
            }
        }
    }

    /// Wait until the count reaches zero, without a deadline (the caller puts one around it).
    async fn wait_open(&self) -> Result<()> {
        let backend = self.locker.backend();
        // Subscribed before each look, so a count-down between the look and the wait wakes it.
        // Without a subscription it polls, as on a store without notifications.
        let mut sub = backend.subscribe(&self.key).await.unwrap_or_else(|e| {
            tracing::debug!(error = %e, latch = %self.name, "subscribe failed; polling instead");
            None
        });
        let mut backoff = Backoff::new(POLL_MIN, POLL_MAX);
        loop {
            match self.count().await {
                Ok(0) => return Ok(()),
                Ok(_) => {}
                Err(e) if e.is_temporary() => {
                    tracing::debug!(error = %e, latch = %self.name, "latch count not read; looking again");
                }
                Err(e) => return Err(e),
            }
            // The notification wakes it early; the pause bounds a notification that is lost.
            let pause = backoff.next_delay();
            let live = match sub.as_mut() {
                Some(s) => tokio::select! {
                    live = s.notified() => live,
                    () = tokio::time::sleep(pause) => true,
                },
                None => {
                    tokio::time::sleep(pause).await;
                    true
                }
            };
            if !live {
                sub = None;
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
