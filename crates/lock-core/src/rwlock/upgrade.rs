//! The upgradeable read (.NET DistributedLock's `UpgradeableReadLock`): a reader that may
//! become the writer without letting another writer in between.
//!
//! It holds two parts: the **upgrade gate** (`{name}#rw-up`, a mutex, so one upgradeable reader
//! at a time: two could each wait for the other's read to leave), and a read of the lock's gate.
//! The upgrade asks the store for the write side as the holder of that read
//! ([`Side::Upgrade`]): the store grants it once every other reader has left, keeps new readers
//! out while it waits, and lets no writer in first, since writers wait for every read,
//! this one included. Only where the store can ([`Capability::upgrade`](crate::Capability)):
//! elsewhere it is refused with [`LockError::Unsupported`].

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::request::{Opts, request_settings};
use super::{RwLock, UPGRADE_SUFFIX};
use crate::backend::Side;
use crate::caller::HolderMark;
use crate::parts::{any_lost, release_all, release_quietly, until_live};
use crate::{FencingToken, LockError, LockGuard, Result};

/// An upgradeable read request being built: `rw.upgradeable_read().wait(..).acquire().await`.
#[derive(Debug)]
#[must_use = "an upgradeable read request does nothing until acquired"]
pub struct UpgradeableRequest<'a> {
    pub(super) rw: &'a RwLock,
    pub(super) opts: Opts,
}

impl UpgradeableRequest<'_> {
    request_settings!();

    /// Take the upgradeable read, waiting up to the request's wait (for the upgrade gate, then
    /// for a writer to leave).
    ///
    /// # Errors
    /// [`LockError::Unsupported`] where the store cannot upgrade; [`LockError::WouldDeadlock`]
    /// when the caller already holds this lock; [`LockError::Timeout`] (naming the lock) at
    /// the deadline; backend errors.
    pub async fn acquire(self) -> Result<UpgradeableReadGuard> {
        let started = Instant::now();
        let read = self.rw.upgradeable_inner(false, self.opts);
        let deadline = self.opts.deadline(started)?;
        match crate::deadline::by_deadline(deadline, self.rw.name(), started, read).await? {
            Some(g) => Ok(g),
            None => unreachable!("upgradeable_inner(false) returns a guard or an error"),
        }
    }

    /// Take the upgradeable read without waiting: `Ok(None)` when another upgradeable reader
    /// or a writer holds or waits.
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire), without the timeout.
    pub async fn try_acquire(self) -> Result<Option<UpgradeableReadGuard>> {
        self.rw.upgradeable_inner(true, self.opts).await
    }
}

/// A held upgradeable read: readers share the lock with it, writers and other upgradeable
/// readers wait. [`upgrade`](Self::upgrade) makes it the writer. Dropping it releases every
/// part in the background.
#[derive(Debug)]
#[must_use = "dropping the guard releases the lock in the background"]
pub struct UpgradeableReadGuard {
    gate: LockGuard,
    read: LockGuard,
    write: Option<(LockGuard, HolderMark)>,
    lease: Option<Duration>,
    _mark: HolderMark,
    rw: RwLock,
}

impl RwLock {
    /// Start building an upgradeable read request: one such reader at a time, sharing the lock
    /// with plain readers, and able to [`upgrade`](UpgradeableReadGuard::upgrade) to the writer
    /// without another writer getting in between.
    pub fn upgradeable_read(&self) -> UpgradeableRequest<'_> {
        UpgradeableRequest { rw: self, opts: Opts::default() }
    }

    /// The upgrade gate's lock key (`{name}#rw-up`): held by the upgradeable reader.
    pub fn upgrade_key(&self) -> String {
        format!("{}{UPGRADE_SUFFIX}", self.name)
    }

    async fn upgradeable_inner(&self, once: bool, opts: Opts) -> Result<Option<UpgradeableReadGuard>> {
        let backend = self.locker.backend();
        if !backend.capabilities().upgrade {
            return Err(LockError::Unsupported { backend: backend.name(), what: "upgradeable read locks" });
        }
        let held = self.holders.of_caller();
        if held.reads + held.writes > 0 {
            let reason =
                "it holds this lock and asks for an upgradeable read (its own hold would block the upgrade)";
            return Err(LockError::WouldDeadlock { key: self.name.to_string(), reason });
        }
        let started = Instant::now();
        let deadline = opts.deadline(started)?;
        self.check_slots(once, deadline).await?;
        let up = self.upgrade_key();
        let (up, lease) = (&up, opts.lease);
        let gather = move || async move {
            let Some(gate) = self.part(up, Side::Exclusive, once, deadline, lease, started).await? else {
                return Ok(None);
            };
            match self.part(&self.gate, Side::Read, once, deadline, lease, started).await {
                Ok(Some(read)) => Ok(Some((gate, read))),
                other => {
                    release_quietly("an upgradeable read", gate.release()).await;
                    other.map(|_| None)
                }
            }
        };
        // The upgrade gate can run out while the read waits for a writer: another upgradeable
        // reader may hold it then.
        let held = until_live(
            once,
            gather,
            |(gate, _): &(LockGuard, LockGuard)| gate.is_lost(),
            |(gate, read): (LockGuard, LockGuard)| {
                drop(gate);
                release_quietly("an upgradeable read", read.release())
            },
        )
        .await?;
        let Some((gate, read)) = held else { return Ok(None) };
        let rw = self.clone();
        Ok(Some(UpgradeableReadGuard {
            gate,
            read,
            write: None,
            lease: opts.lease,
            _mark: self.holders.mark(false),
            rw,
        }))
    }
}

impl UpgradeableReadGuard {
    /// Become the writer, waiting at most `wait` for the other readers to leave; new readers
    /// are kept out meanwhile, and no writer gets in first. Once upgraded, [`fence`](Self::fence)
    /// is the write's token and [`release`](Self::release) releases the write with the rest.
    /// Upgrading an upgraded guard does nothing.
    ///
    /// # Errors
    /// [`LockError::Timeout`] (the guard still holds its read); [`LockError::WouldDeadlock`]
    /// when the caller also holds a plain read of this lock (it would wait for itself);
    /// backend errors.
    pub async fn upgrade(&mut self, wait: Duration) -> Result<()> {
        self.upgrade_inner(Some(wait)).await.map(drop)
    }

    /// Become the writer if no other reader holds the lock now: `Ok(false)` otherwise (the
    /// guard still holds its read).
    ///
    /// # Errors
    /// As [`upgrade`](Self::upgrade), without the timeout.
    pub async fn try_upgrade(&mut self) -> Result<bool> {
        self.upgrade_inner(None).await
    }

    async fn upgrade_inner(&mut self, wait: Option<Duration>) -> Result<bool> {
        if self.write.is_some() {
            return Ok(true);
        }
        let rw = &self.rw;
        if rw.holders.of_caller().reads > 1 {
            let reason =
                "it holds a plain read besides the upgradeable one, which the upgrade would wait for";
            return Err(LockError::WouldDeadlock { key: rw.name.to_string(), reason });
        }
        let started = Instant::now();
        let side = Side::Upgrade { reader: self.read.owner() };
        let deadline = wait.map(|w| started + w);
        let write = rw.part(&rw.gate, side, wait.is_none(), deadline, self.lease, started).await?;
        Ok(match write {
            Some(w) => {
                self.write = Some((w, rw.holders.mark(true)));
                true
            }
            None => false,
        })
    }

    /// Whether the guard holds the write side.
    pub fn is_upgraded(&self) -> bool {
        self.write.is_some()
    }

    /// The write's fencing token once upgraded (strictly greater than every earlier writer's);
    /// `None` before, or without [`Capability::fencing`](crate::Capability).
    pub fn fence(&self) -> Option<FencingToken> {
        self.write.as_ref().and_then(|(w, _)| w.fence())
    }

    fn parts(&self) -> impl Iterator<Item = &LockGuard> {
        [&self.gate, &self.read].into_iter().chain(self.write.as_ref().map(|(w, _)| w))
    }

    /// Resolves when any part is known lost: the read, the upgrade gate, or the write.
    pub fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        let tokens: Vec<CancellationToken> = self.parts().map(LockGuard::lost_token).collect();
        any_lost(tokens)
    }

    /// Whether any part is known lost.
    pub fn is_lost(&self) -> bool {
        self.parts().any(LockGuard::is_lost)
    }

    /// Release every part: the write (if upgraded) and the read together, then the upgrade
    /// gate, so the next upgradeable reader finds the lock as plain readers do.
    ///
    /// # Errors
    /// The first error among the parts; every part is still released.
    pub async fn release(self) -> Result<()> {
        let write = self.write.map(|(w, _)| w);
        let held = release_all(std::iter::once(self.read).chain(write).map(LockGuard::release)).await;
        held.and(self.gate.release().await)
    }

    /// Forget every part without releasing it, as a crashed process would.
    pub fn abandon(self) {
        self.gate.abandon();
        self.read.abandon();
        if let Some((w, _)) = self.write {
            w.abandon();
        }
    }
}
