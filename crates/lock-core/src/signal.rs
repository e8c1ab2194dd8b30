//! The lost-lock signal shared by a guard, the watchdog and the backend.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::backend::{Confirmed, Mutex};

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
    /// The hold's local deadlines, so that a reader past one is told lost even while the task
    /// that would mark it has not run (a starved runtime, a blocked worker thread): the flag
    /// alone is as late as that task.
    deadlines: Arc<Mutex<Deadlines>>,
}

/// The two instants past which a hold reads lost; each only ever moves later.
#[derive(Debug, Default)]
struct Deadlines {
    /// The lease's: its grant or last confirmed renewal, less the drift margin.
    lease: Option<Instant>,
    /// The server's own, where it keeps a hold for less than its lease and the backend extends
    /// it in the background (a bucket's TTL, a session's timeout): the last confirmed send of
    /// the hold's session, and how long after one the server surely keeps it.
    server: Option<(Confirmed, Duration)>,
}

impl Deadlines {
    /// The earlier of the two.
    fn first(&self) -> Option<Instant> {
        let server = self.server.as_ref().map(|(c, span)| c.at() + *span);
        match (self.lease, server) {
            (Some(l), Some(s)) => Some(l.min(s)),
            (l, s) => l.or(s),
        }
    }
}

/// `slot` set to the later of itself and `at`.
fn extend(slot: &mut Option<Instant>, at: Instant) {
    *slot = Some(slot.map_or(at, |old| old.max(at)));
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
            deadlines: Arc::default(),
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
        extend(&mut self.deadlines.lock().lease, deadline);
    }

    /// The server keeps the hold `span` after the last send `confirmed` records (its TTL or
    /// session timeout, less the drift margin), and may free it from then on, whatever lease
    /// was asked for. For a backend whose server keeps holds for less than their lease, or
    /// for no lease at all, and whose background task keeps them alive: past that instant the
    /// guard reads lost by itself, even while the task that would tell it is starved of CPU.
    /// A signal never tied reads only its lease.
    pub fn kept_by(&self, confirmed: &Confirmed, span: Duration) {
        self.deadlines.lock().server = Some((confirmed.clone(), span));
    }

    /// Tied to the same server deadline as `other` (a nested acquisition's signal, tied as the
    /// hold's first).
    pub fn kept_as(&self, other: &LeaseSignal) {
        if Arc::ptr_eq(&self.deadlines, &other.deadlines) {
            return;
        }
        let server = other.deadlines.lock().server.clone();
        if server.is_some() {
            self.deadlines.lock().server = server;
        }
    }

    /// The instant past which the hold reads lost, if it has one: the earlier of its lease's
    /// deadline and the server's.
    pub(crate) fn deadline(&self) -> Option<Instant> {
        self.deadlines.lock().first()
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
        let passed = self.deadline().is_some_and(|d| d <= Instant::now());
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

    #[tokio::test(start_paused = true)]
    async fn the_servers_deadline_is_read_lost_without_any_task_marking_it() {
        let s = LeaseSignal::new();
        let now = Instant::now();
        let confirmed = Confirmed::new(now);
        s.extend_deadline(now + Duration::from_secs(9));
        s.kept_by(&confirmed, Duration::from_millis(300));
        let nested = LeaseSignal::new();
        nested.kept_as(&s);
        // An earlier confirmation does not move it back.
        confirmed.confirm(now - Duration::from_millis(100));
        assert_eq!(s.deadline(), Some(now + Duration::from_millis(300)));
        tokio::time::advance(Duration::from_millis(200)).await;
        confirmed.confirm(Instant::now());
        assert_eq!(nested.deadline(), Some(now + Duration::from_millis(500)));
        tokio::time::advance(Duration::from_millis(299)).await;
        assert_eq!(s.state(), LeaseState::Held);
        tokio::time::advance(Duration::from_millis(1)).await;
        assert_eq!(s.state(), LeaseState::Lost(LostReason::DeadlinePassed));
        assert!(nested.is_lost() && s.token().is_cancelled());
    }

    #[test]
    fn a_later_server_deadline_leaves_the_lease_deadline_first() {
        let s = LeaseSignal::new();
        let now = Instant::now();
        s.extend_deadline(now + Duration::from_secs(1));
        s.kept_by(&Confirmed::new(now), Duration::from_secs(5));
        assert_eq!(s.deadline(), Some(now + Duration::from_secs(1)));
        assert_eq!(LeaseSignal::new().deadline(), None);
    }
}
