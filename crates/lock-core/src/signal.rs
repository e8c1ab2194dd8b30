//! The lost-lock signal shared by a guard, the watchdog and the backend.

use std::sync::Arc;

use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::backend::Mutex;

/// What the holder knows about its lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LeaseState {
    /// Confirmed by the backend within the lease.
    Held,
    /// The last renewal failed for a temporary reason (or the session is disconnected); the lock
    /// may still be held. It becomes `Lost` at the local lease deadline at the latest.
    Uncertain,
    /// Known lost: stop touching the protected resource.
    Lost(LostReason),
}

/// Why a lease was lost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LostReason {
    /// A renewal was answered "not the owner" (expired and maybe taken over, or deleted).
    NotOwner,
    /// The local lease deadline passed without a confirmed renewal.
    DeadlinePassed,
    /// The session or connection that carried the lock ended.
    SessionEnded,
    /// The backend answered a renewal with a permanent error.
    BackendError,
}

/// Shared, cloneable lost-lock signal. Backends receive one per acquisition and call
/// [`mark_lost`](Self::mark_lost) when they learn of a loss first (session expiry, a killed
/// connection); the core watchdog does the same for failed renewals and passed deadlines.
#[derive(Clone, Debug)]
pub struct LeaseSignal {
    lost: CancellationToken,
    /// Clones share the channel (a watch sender is itself a shared handle).
    state: watch::Sender<LeaseState>,
    /// For the transition events and metrics: which backend, which key (`None` for a signal
    /// made outside a `Locker`).
    backend: &'static str,
    key: Option<Arc<str>>,
    /// The latest local lease deadline of the hold (only ever moved later), so that a reader
    /// past it is told lost even while the watchdog task that would mark it has not run (a
    /// starved runtime, a blocked worker thread): the flag alone is as late as that task.
    deadline: Arc<Mutex<Option<Instant>>>,
}

impl Default for LeaseSignal {
    fn default() -> Self {
        Self::new()
    }
}

impl LeaseSignal {
    /// A signal in state [`LeaseState::Held`].
    pub fn new() -> Self {
        LeaseSignal {
            lost: CancellationToken::new(),
            state: watch::Sender::new(LeaseState::Held),
            backend: "unknown",
            key: None,
            deadline: Arc::default(),
        }
    }

    /// The signal of a new hold of `key` on `backend`, named in its events and metrics.
    pub(crate) fn for_hold(key: &Arc<str>, backend: &'static str) -> Self {
        LeaseSignal { backend, key: Some(key.clone()), ..Self::new() }
    }

    fn key(&self) -> &str {
        self.key.as_deref().unwrap_or("")
    }

    /// Mark the lease lost; idempotent, the first reason wins.
    pub fn mark_lost(&self, reason: LostReason) {
        let changed = self.state.send_if_modified(|s| {
            if matches!(s, LeaseState::Lost(_)) {
                false
            } else {
                *s = LeaseState::Lost(reason);
                true
            }
        });
        if changed {
            tracing::warn!(
                backend = self.backend,
                key = self.key(),
                reason = crate::observe::reason_label(reason),
                "lock lease lost"
            );
            crate::observe::lost(self.backend, reason);
        }
        self.lost.cancel();
    }

    /// Mark the lease uncertain (ignored once lost).
    pub fn mark_uncertain(&self) {
        let changed = self.state.send_if_modified(|s| {
            let change = *s == LeaseState::Held;
            if change {
                *s = LeaseState::Uncertain;
            }
            change
        });
        if changed {
            tracing::warn!(backend = self.backend, key = self.key(), "lock lease uncertain");
            crate::observe::uncertain(self.backend);
        }
    }

    /// Mark the lease confirmed (ignored once lost).
    pub fn mark_held(&self) {
        let changed = self.state.send_if_modified(|s| {
            let change = *s == LeaseState::Uncertain;
            if change {
                *s = LeaseState::Held;
            }
            change
        });
        if changed {
            tracing::info!(backend = self.backend, key = self.key(), "lock lease confirmed again");
        }
    }

    /// The hold's local lease deadline is at least `deadline` (a grant or a confirmed renewal).
    pub(crate) fn extend_deadline(&self, deadline: Instant) {
        let mut d = self.deadline.lock();
        *d = Some(d.map_or(deadline, |old| old.max(deadline)));
    }

    /// Whether the lease was marked lost (the flag alone: no clock read, for the watchdog's
    /// pass over every lease, which marks passed deadlines itself).
    pub(crate) fn is_marked(&self) -> bool {
        self.lost.is_cancelled()
    }

    /// Mark the lease lost if its local deadline has passed; whether it is lost.
    fn lost_by_clock(&self) -> bool {
        if self.lost.is_cancelled() {
            return true;
        }
        let passed = self.deadline.lock().is_some_and(|d| d <= Instant::now());
        if passed {
            self.mark_lost(LostReason::DeadlinePassed);
        }
        passed
    }

    /// Current state. Past the local lease deadline it is `Lost` even before the watchdog task
    /// has marked it.
    pub fn state(&self) -> LeaseState {
        self.lost_by_clock();
        *self.state.borrow()
    }

    /// Whether the lease is known lost: marked, or past its local lease deadline.
    pub fn is_lost(&self) -> bool {
        self.lost_by_clock()
    }

    /// A token cancelled when the lease is lost; select on `token.cancelled()`.
    pub fn token(&self) -> CancellationToken {
        self.lost.clone()
    }

    /// A receiver of every state change (Held / Uncertain / Lost).
    pub fn subscribe(&self) -> watch::Receiver<LeaseState> {
        self.state.subscribe()
    }

    /// Whether `other` is a clone of this signal (the same hold's), so a backend that keeps the
    /// signals of a hold's guards stores each once.
    pub fn same_as(&self, other: &LeaseSignal) -> bool {
        self.state.same_channel(&other.state)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clones_are_the_same_signal_and_new_ones_are_not() {
        let a = LeaseSignal::new();
        assert!(a.same_as(&a.clone()));
        assert!(!a.same_as(&LeaseSignal::new()));
    }
}
