//! Taking either side: natively a shared or exclusive hold of the gate; else a reader's slot
//! and gate check, a writer's gate and every slot.

use std::time::Duration;

use futures_util::future::join_all;
use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio::time::Instant;

use super::guard::ReadPart;
use super::request::Opts;
use super::{ReadGuard, RwLock, WriteGuard};
use crate::backend::Side;
use crate::parts::{release_quietly, until_live};
use crate::{LockError, LockGuard, Permit, Result};

/// What a failed part release logs.
const RW: &str = "a read-write lock";

impl RwLock {
    pub(super) async fn read_inner(&self, once: bool, opts: Opts) -> Result<Option<ReadGuard>> {
        self.not_blocked_by_caller(false)?;
        let started = Instant::now();
        let deadline = opts.deadline(started)?;
        self.check_slots(once, deadline).await?;
        if self.native {
            let shared = self.part(&self.gate, Side::Read, once, deadline, opts.lease, started).await?;
            return Ok(
                shared.map(|g| ReadGuard { part: ReadPart::Shared(g), _mark: self.holders.mark(false) })
            );
        }
        let marked = |permit| ReadGuard { part: ReadPart::Slot(permit), _mark: self.holders.mark(false) };
        let permit = match self.readers.take(once, deadline, opts.lease).await {
            Ok(Some(p)) => p,
            Ok(None) => return Ok(None),
            Err(LockError::Timeout { .. }) => return Err(self.timeout(started)),
            Err(e) => return Err(e),
        };
        let busy = match self.gate_busy(opts.lease).await {
            Ok(b) => b,
            Err(e) => {
                release_quietly(RW, permit.release()).await;
                return Err(e);
            }
        };
        if !busy {
            return Ok(Some(marked(permit)));
        }
        // A writer holds or waits: step aside and queue at the gate behind it. Once through,
        // take the slot while still holding the gate, so that the writers queued after this
        // reader cannot turn it away again (readers would starve under a stream of writers).
        release_quietly(RW, permit.release()).await;
        if once {
            return Ok(None);
        }
        let mut req = self.gate_request(opts.lease);
        if let Some(d) = deadline {
            req = req.wait(d.saturating_duration_since(Instant::now()));
        }
        let gate = match req.acquire().await {
            Ok(g) => g,
            Err(LockError::Timeout { .. }) => return Err(self.timeout(started)),
            Err(e) => return Err(e),
        };
        // Only readers hold slots while the gate is held here: they leave in time.
        let permit = self.readers.take(false, deadline, opts.lease).await;
        release_quietly(RW, gate.release()).await;
        match permit {
            Ok(Some(permit)) => Ok(Some(marked(permit))),
            Ok(None) => unreachable!("take(false) returns a permit or an error"),
            Err(LockError::Timeout { .. }) => Err(self.timeout(started)),
            Err(e) => Err(e),
        }
    }

    pub(super) async fn write_inner(&self, once: bool, opts: Opts) -> Result<Option<WriteGuard>> {
        self.not_blocked_by_caller(true)?;
        let started = Instant::now();
        let deadline = opts.deadline(started)?;
        self.check_slots(once, deadline).await?;
        if self.native {
            let gate = self.part(&self.gate, Side::Write, once, deadline, opts.lease, started).await?;
            return Ok(gate.map(|gate| WriteGuard {
                gate,
                slots: Vec::new(),
                _mark: self.holders.mark(true),
            }));
        }
        let lease = opts.lease;
        until_live(
            once,
            move || self.gather_write(once, lease, deadline, started),
            WriteGuard::is_lost,
            |w: WriteGuard| release_quietly(RW, w.release()),
        )
        .await
    }

    /// The gate, then every reader slot at once, each waiting until `deadline` unless `once`.
    async fn gather_write(
        &self,
        once: bool,
        lease: Option<Duration>,
        deadline: Option<Instant>,
        started: Instant,
    ) -> Result<Option<WriteGuard>> {
        let remaining = || deadline.map(|d| d.saturating_duration_since(Instant::now()));
        let gate = if once {
            match self.gate_request(lease).try_acquire().await? {
                Some(g) => g,
                None => return Ok(None),
            }
        } else {
            let mut req = self.gate_request(lease);
            if let Some(w) = remaining() {
                req = req.wait(w);
            }
            match req.acquire().await {
                Ok(g) => g,
                Err(LockError::Timeout { .. }) => return Err(self.timeout(started)),
                Err(e) => return Err(e),
            }
        };
        // Holding the gate, this writer now takes every reader slot at once: new readers step
        // aside (they see the gate held), current ones finish and release.
        let k = self.readers.permits();
        let mut parts: FuturesUnordered<_> = (0..k)
            .map(|slot| {
                let mut req = self.readers.slot_request(slot, lease);
                let w = if once { Some(Duration::ZERO) } else { remaining() };
                if let Some(w) = w {
                    req = req.wait(w);
                }
                async move { (slot, req.try_acquire_or_wait(once).await) }
            })
            .collect();
        let mut slots = Vec::with_capacity(k as usize);
        let mut failure: Option<Option<LockError>> = None;
        while let Some((slot, result)) = parts.next().await {
            match result {
                Ok(Some(guard)) => slots.push(Permit::new(slot, guard)),
                // Let the other single attempts finish rather than cut them off: a cut-off
                // attempt is undone in the background, and until then it can stand in the way
                // of the next acquisition.
                Ok(None) => failure = Some(None),
                Err(LockError::Timeout { .. }) => {
                    failure = Some(Some(self.timeout(started)));
                    break;
                }
                Err(e) => {
                    failure = Some(Some(e));
                    break;
                }
            }
        }
        // Dropping the unfinished acquisitions leaves nothing held.
        drop(parts);
        if let Some(failure) = failure {
            join_all(slots.into_iter().map(|p| release_quietly(RW, p.release()))).await;
            release_quietly(RW, gate.release()).await;
            return match failure {
                None => Ok(None),
                Some(e) => Err(e),
            };
        }
        slots.sort_by_key(Permit::slot);
        Ok(Some(WriteGuard { gate, slots, _mark: self.holders.mark(true) }))
    }
}

impl RwLock {
    /// One part of the lock (`key`: the gate, or the upgrade gate) on `side`, one attempt when
    /// `once`, else waiting until `deadline`; a timeout names the lock.
    pub(super) async fn part(
        &self,
        key: &str,
        side: Side,
        once: bool,
        deadline: Option<Instant>,
        lease: Option<Duration>,
        started: Instant,
    ) -> Result<Option<LockGuard>> {
        let mut req = self.locker.lock(key.to_owned()).side(side);
        if let Some(l) = lease {
            req = req.lease(l);
        }
        if let Some(d) = deadline {
            req = req.wait(d.saturating_duration_since(Instant::now()));
        }
        match req.try_acquire_or_wait(once).await {
            Err(LockError::Timeout { .. }) => Err(self.timeout(started)),
            other => other,
        }
    }
}

impl crate::LockRequest<'_> {
    /// One attempt when `once`, else an acquisition with the request's wait.
    pub(super) async fn try_acquire_or_wait(self, once: bool) -> Result<Option<LockGuard>> {
        if once { self.try_acquire().await } else { self.acquire().await.map(Some) }
    }
}
