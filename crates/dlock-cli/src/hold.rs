//! What `dlock run` holds while the command runs: the mutex, one permit of a semaphore, or the
//! read or write side of a read-write lock.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use dlock::{FencingToken, LockGuard, Locker, Permit, ReadGuard, Result, RwLock, Semaphore, WriteGuard};

/// Which primitive `dlock run` takes on its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The mutex (the default).
    Mutex,
    /// One of this many permits of a semaphore.
    Permits(u32),
    /// The read side of a read-write lock with this many reader slots.
    Read(u32),
    /// The write side of a read-write lock with this many reader slots.
    Write(u32),
}

/// A held lock of any [`Mode`].
#[derive(Debug)]
pub enum Hold {
    /// The mutex.
    Mutex(LockGuard),
    /// A semaphore permit.
    Permit(Permit),
    /// A read lock.
    Read(ReadGuard),
    /// A write lock.
    Write(WriteGuard),
}

/// A future that resolves when a hold is known lost.
pub type Lost = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

impl Hold {
    /// Wait up to `wait` for `key` in `mode`.
    ///
    /// # Errors
    /// As the primitive's acquisition: a timeout, bad input (a permit or slot count out of
    /// range, a name too long for the primitive's keys), backend errors.
    pub async fn acquire(locker: &Locker, key: &str, mode: Mode, wait: Duration) -> Result<Hold> {
        Ok(match mode {
            Mode::Mutex => Hold::Mutex(locker.lock(key).wait(wait).acquire().await?),
            Mode::Permits(n) => {
                Hold::Permit(Semaphore::new(locker, key, n)?.acquire().wait(wait).acquire().await?)
            }
            Mode::Read(k) => {
                Hold::Read(RwLock::new(locker, key)?.with_reader_slots(k)?.read().wait(wait).acquire().await?)
            }
            Mode::Write(k) => Hold::Write(
                RwLock::new(locker, key)?.with_reader_slots(k)?.write().wait(wait).acquire().await?,
            ),
        })
    }

    /// The fencing token to export: only one that fences (the mutex's, the writer's). A
    /// permit's or a reader's slot token orders nothing across holders (they are not
    /// exclusive), and a number that looks like a fence would protect nothing.
    pub fn fence(&self) -> Option<FencingToken> {
        match self {
            Hold::Mutex(g) => g.fence(),
            Hold::Write(w) => w.fence(),
            Hold::Permit(_) | Hold::Read(_) => None,
        }
    }

    /// Extra environment for the command: the permit's slot (`0..N`), so that each of the N
    /// concurrent copies of a job can tell itself apart.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        match self {
            Hold::Permit(p) => vec![("DLOCK_PERMIT_SLOT", p.slot().to_string())],
            _ => Vec::new(),
        }
    }

    /// Resolves when the hold is known lost (for a write lock: any of its parts).
    pub fn lost(&self) -> Lost {
        match self {
            Hold::Mutex(g) => Box::pin(g.lost()),
            Hold::Permit(p) => Box::pin(p.lost()),
            Hold::Read(r) => Box::pin(r.lost()),
            Hold::Write(w) => Box::pin(w.lost()),
        }
    }

    /// Release the hold.
    ///
    /// # Errors
    /// [`LockError::LeaseLost`](dlock::LockError::LeaseLost) when it had been lost; backend
    /// errors.
    pub async fn release(self) -> Result<()> {
        match self {
            Hold::Mutex(g) => g.release().await,
            Hold::Permit(p) => p.release().await,
            Hold::Read(r) => r.release().await,
            Hold::Write(w) => w.release().await,
        }
    }
}
