//! The read and write requests being built.

use std::time::Duration;

use tokio::time::Instant;

use super::{ReadGuard, RwLock, WriteGuard};
#[cfg(doc)]
use crate::LockError;
use crate::deadline::by_deadline;
use crate::{Result, validate_wait};

#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Opts {
    pub(super) wait: Option<Duration>,
    pub(super) lease: Option<Duration>,
}

impl Opts {
    pub(super) fn deadline(&self, started: Instant) -> Result<Option<Instant>> {
        match self.wait {
            Some(w) => {
                validate_wait(w)?;
                Ok(Some(started + w))
            }
            None => Ok(None),
        }
    }
}

macro_rules! request_settings {
    () => {
        /// Wait at most `wait` in `acquire` (default: without a bound).
        pub fn wait(mut self, wait: Duration) -> Self {
            self.opts.wait = Some(wait);
            self
        }

        /// A fixed lease for every part: no watchdog; the parts expire after `lease` unless
        /// renewed (default: the watchdog lease, renewed while held).
        pub fn lease(mut self, lease: Duration) -> Self {
            self.opts.lease = Some(lease);
            self
        }
    };
}

pub(super) use request_settings;

/// A read request being built: `rw.read().wait(..).acquire().await`.
#[derive(Debug)]
#[must_use = "a read request does nothing until acquired"]
pub struct ReadRequest<'a> {
    pub(super) rw: &'a RwLock,
    pub(super) opts: Opts,
}

impl ReadRequest<'_> {
    request_settings!();

    /// Take the read lock, waiting up to the request's wait.
    ///
    /// # Errors
    /// [`LockError::Timeout`] (naming the lock) at the deadline; invalid input; backend errors.
    pub async fn acquire(self) -> Result<ReadGuard> {
        let started = Instant::now();
        let read = self.rw.read_inner(false, self.opts);
        match by_deadline(self.opts.deadline(started)?, self.rw.name(), started, read).await? {
            Some(g) => Ok(g),
            None => unreachable!("read_inner(false) returns a guard or an error"),
        }
    }

    /// Take the read lock without waiting: `Ok(None)` when a writer holds or waits for it, or
    /// all reader slots are taken.
    ///
    /// # Errors
    /// Invalid input and backend errors.
    pub async fn try_acquire(self) -> Result<Option<ReadGuard>> {
        self.rw.read_inner(true, self.opts).await
    }
}

/// A write request being built: `rw.write().wait(..).acquire().await`.
#[derive(Debug)]
#[must_use = "a write request does nothing until acquired"]
pub struct WriteRequest<'a> {
    pub(super) rw: &'a RwLock,
    pub(super) opts: Opts,
}

impl WriteRequest<'_> {
    request_settings!();

    /// Take the write lock, waiting up to the request's wait (for the gate, then for the
    /// readers to leave).
    ///
    /// # Errors
    /// [`LockError::Timeout`] (naming the lock) at the deadline; invalid input; backend errors.
    pub async fn acquire(self) -> Result<WriteGuard> {
        let started = Instant::now();
        let write = self.rw.write_inner(false, self.opts);
        match by_deadline(self.opts.deadline(started)?, self.rw.name(), started, write).await? {
            Some(g) => Ok(g),
            None => unreachable!("write_inner(false) returns a guard or an error"),
        }
    }

    /// Take the write lock without waiting: `Ok(None)` when anyone holds it.
    ///
    /// # Errors
    /// Invalid input and backend errors.
    pub async fn try_acquire(self) -> Result<Option<WriteGuard>> {
        self.rw.write_inner(true, self.opts).await
    }
}
