//! The held read and write locks.

use std::future::Future;

use futures_util::future::{join_all, select_all};
use tokio_util::sync::CancellationToken;

#[cfg(doc)]
use crate::LockError;
use crate::caller::HolderMark;
use crate::{FencingToken, LockGuard, Permit, Result};

/// A held read lock: one reader slot. Dropping it releases in the background.
///
/// Readers have no fencing token: they do not exclude each other, so no number could order
/// them, and a store cannot use a reader's token to refuse anything. Fence the writes with
/// [`WriteGuard::fence`].
#[derive(Debug)]
#[must_use = "dropping the guard releases the read lock in the background"]
pub struct ReadGuard {
    pub(super) permit: Permit,
    pub(super) _mark: HolderMark,
}

impl ReadGuard {
    /// The reader slot held.
    pub fn permit(&self) -> &Permit {
        &self.permit
    }

    /// Resolves when the read lock is known lost (its slot's lease).
    pub fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        self.permit.lost()
    }

    /// Whether the read lock is known lost.
    pub fn is_lost(&self) -> bool {
        self.permit.is_lost()
    }

    /// Release the read lock.
    ///
    /// # Errors
    /// [`LockError::LeaseLost`] when its lease had been lost; backend errors.
    pub async fn release(self) -> Result<()> {
        self.permit.release().await
    }

    /// Forget the read lock without releasing it, as a crashed process would.
    pub fn abandon(self) {
        self.permit.abandon();
    }
}

/// A held write lock: the gate and every reader slot. Dropping it releases in the background.
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

    /// The reader slots held, by slot number.
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
        async move {
            select_all(tokens.into_iter().map(|t| Box::pin(t.cancelled_owned()))).await;
        }
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
        let slots = join_all(self.slots.into_iter().map(Permit::release));
        let (gate, slots) = tokio::join!(self.gate.release(), slots);
        std::iter::once(gate).chain(slots).collect::<Result<Vec<()>>>().map(drop)
    }

    /// Forget the write lock without releasing it, as a crashed process would.
    pub fn abandon(self) {
        self.gate.abandon();
        self.slots.into_iter().for_each(Permit::abandon);
    }
}
