//! What `dlock run` holds while the command runs: the mutex, one permit of a semaphore, or the
//! read or write side of a read-write lock.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use std::process::ExitCode;

use dlock::{FencingToken, LockGuard, Locker, Permit, ReadGuard, Result, RwLock, Semaphore, WriteGuard};

use crate::EXIT_LOST;
use crate::signals::{Signals, any_signal};

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

impl Mode {
    /// Check `key` as a name of this primitive, whose own keys add a suffix to it.
    ///
    /// # Errors
    /// [`LockError::InvalidKey`](dlock::LockError::InvalidKey) with the primitive's limit.
    pub fn check(self, key: &str) -> Result<()> {
        match self {
            Mode::Mutex => dlock::validate_key(key),
            Mode::Permits(_) => Semaphore::validate_name(key),
            Mode::Read(_) | Mode::Write(_) => RwLock::validate_name(key),
        }
    }
}

/// Hold `guard` of `key` without a command, as `etcdctl lock NAME` does: print the key and its
/// fencing token (`-` when the hold has none), then hold until stdin reaches its end, a signal
/// arrives (exit 0 once released), or the hold is lost (exit 76).
pub async fn hold_until_told(key: &str, guard: Hold, sigs: &mut Signals) -> ExitCode {
    let fence = guard.fence().map_or_else(|| "-".to_owned(), |f| f.to_string());
    let slot = guard.env().into_iter().map(|(k, v)| format!(" {k}={v}")).collect::<String>();
    println!("{key} {fence}{slot}");
    let _ = std::io::Write::flush(&mut std::io::stdout());
    let lost = guard.lost();
    tokio::select! {
        () = lost => {
            eprintln!("dlock: lock {key:?} was lost");
            let _ = guard.release().await;
            return ExitCode::from(EXIT_LOST);
        }
        () = stdin_closed() => {}
        _ = any_signal(sigs) => {}
    }
    match guard.release().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(dlock::LockError::LeaseLost { .. }) => {
            eprintln!("dlock: lock {key:?} was lost");
            ExitCode::from(EXIT_LOST)
        }
        Err(e) => crate::report::fail("", &e),
    }
}

/// Resolves once stdin reaches its end (or cannot be read). Read on a thread of its own: a
/// read of the runtime's stdin would keep the runtime from shutting down while it blocks.
async fn stdin_closed() {
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    std::thread::spawn(move || {
        let mut buf = [0u8; 512];
        while matches!(std::io::Read::read(&mut std::io::stdin(), &mut buf), Ok(n) if n > 0) {}
        let _ = tx.send(());
    });
    let _ = rx.await;
}

impl Hold {
    /// Wait up to `wait` (`None`: without a bound) for `key` in `mode`.
    ///
    /// # Errors
    /// As the primitive's acquisition: a timeout, bad input (a permit or slot count out of
    /// range, a name too long for the primitive's keys), backend errors.
    pub async fn acquire(locker: &Locker, key: &str, mode: Mode, wait: Option<Duration>) -> Result<Hold> {
        // The library's requests wait without a bound unless given one.
        let wait = wait.unwrap_or(dlock::MAX_WAIT);
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
