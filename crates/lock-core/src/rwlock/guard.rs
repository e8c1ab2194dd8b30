//! The held read and write locks.

use std::future::Future;

use tokio_util::sync::CancellationToken;

#[cfg(doc)]
use crate::LockError;
use crate::caller::HolderMark;
use crate::parts::{any_lost, release_all};
use crate::{FencingToken, LockGuard, Permit, Result};

/// A held read lock: a shared hold of the gate ([`RwLock::is_native`](super::RwLock::is_native)),
/// or one reader slot. Dropping it releases in the background.
///
/// Readers have no fencing token: they do not exclude each other, so no number could order
/// them, and a store cannot use a reader's token to refuse anything. Fence the writes with
/// [`WriteGuard::fence`].
#[derive(Debug)]
#[must_use = "dropping the guard releases the read lock in the background"]
pub struct ReadGuard {
    pub(super) part: ReadPart,
    pub(super) _mark: HolderMark,
}

/// What a reader holds.
#[derive(Debug)]
pub(super) enum ReadPart {
    /// A shared hold of the gate.
    Shared(LockGuard),
    /// A reader slot.
    Slot(Permit),
}

impl ReadGuard {
    /// The reader slot held; `None` for a shared hold of the gate.
    pub fn permit(&self) -> Option<&Permit> {
        match &self.part {
            ReadPart::Slot(p) => Some(p),
            ReadPart::Shared(_) => None,
        }
    }

    /// The lock key held: the gate's (shared) or the reader slot's.
    pub fn key(&self) -> &str {
        match &self.part {
            ReadPart::Slot(p) => p.key(),
            ReadPart::Shared(g) => g.key(),
        }
    }

    /// Resolves when the read lock is known lost (its lease or session).
    pub fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        let token = match &self.part {
            ReadPart::Slot(p) => p.lost_token(),
            ReadPart::Shared(g) => g.lost_token(),
        };
        async move { token.cancelled_owned().await }
    }

    /// Whether the read lock is known lost.
    pub fn is_lost(&self) -> bool {
        match &self.part {
            ReadPart::Slot(p) => p.is_lost(),
            ReadPart::Shared(g) => g.is_lost(),
        }
    }

    /// Release the read lock.
    ///
    /// # Errors
    /// [`LockError::LeaseLost`] when its lease had been lost; backend errors.
    pub async fn release(self) -> Result<()> {
        match self.part {
            ReadPart::Slot(p) => p.release().await,
            ReadPart::Shared(g) => g.release().await,
        }
    }

    /// Forget the read lock without releasing it, as a crashed process would.
    pub fn abandon(self) {
        match self.part {
            ReadPart::Slot(p) => p.abandon(),
            ReadPart::Shared(g) => g.abandon(),
        }
    }
}

/// A held write lock: the gate, exclusively, and (unless native) every reader slot. Dropping it
/// releases in the background.
#[derive(Debug)]
#[must_use = "dropping the guard releases the write lock in the background"]
pub struct WriteGuard {
    pub(super) gate: LockGuard,
    pub(super) slots: Vec<Permit>,
    pub(super) _mark: HolderMark,
}

impl WriteGuard {
    /// The gate's fencing token: strictly greater than every earlier writer's (`None` without
    /// [`Capability::fencing`](crate::Capability)).
    pub fn fence(&self) -> Option<FencingToken> {
        self.gate.fence()
    }

    /// The gate's guard.
    pub fn gate(&self) -> &LockGuard {
        &self.gate
    }

    /// The reader slots held, by slot number (none when native).
    pub fn slots(&self) -> &[Permit] {
        &self.slots
    }

    fn tokens(&self) -> Vec<CancellationToken> {
        std::iter::once(self.gate.lost_token()).chain(self.slots.iter().map(Permit::lost_token)).collect()
    }

    /// Resolves when any part (the gate or a slot) is known lost: the writer may no longer
    /// exclude everyone.
    pub fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        let tokens = self.tokens();
        any_lost(tokens)
    }

    /// Whether any part is known lost.
    pub fn is_lost(&self) -> bool {
        self.gate.is_lost() || self.slots.iter().any(Permit::is_lost)
    }

    /// Release the write lock: every part at once.
    ///
    /// # Errors
    /// The first error among the parts ([`LockError::LeaseLost`] when a part had been lost);
    /// every part is still released.
    pub async fn release(self) -> Result<()> {
        let (gate, slots) =
            tokio::join!(self.gate.release(), release_all(self.slots.into_iter().map(Permit::release)));
        gate.and(slots)
    }

    /// Forget the write lock without releasing it, as a crashed process would.
    pub fn abandon(self) {
        self.gate.abandon();
        self.slots.into_iter().for_each(Permit::abandon);
    }
}
