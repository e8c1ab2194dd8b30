//! The watchdog: one task per [`Locker`](crate::Locker) that renews every auto-renewed lease in
//! batches and fires the lost signal of any lease whose local deadline passes unconfirmed.
//!
//! The task exists only while leases are registered, so after the last release no renewal
//! traffic remains. It is not woken for every hold: a new lease wakes it only if it is due
//! before the task's alarm, and a release does not wake it at all (the task finds the table
//! empty at its next alarm, at most [`IDLE_CHECK`] away, and exits then). On a 2-core machine
//! a spawn and two cross-thread wake-ups per acquire+release cost ~10% of a Redis lock's round
//! trips (`lock-bench/examples/redis_profile.rs`).

mod lease;
#[cfg(test)]
mod model;

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, MutexGuard};
use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::Notify;
use tokio::time::Instant;
use tracing::Instrument;

pub(crate) use self::lease::NewLease;
use self::lease::{Entry, coalesce_window, local_deadline, period, retry_interval};
use crate::backend::RENEW_BATCH;
use crate::backend::{Mutex, RenewItem};
use crate::observe;
use crate::{LockBackend, LockError, LostReason, OwnerToken};

/// Longest sleep of the task: a table emptied by releases (which do not wake it) is noticed
/// within this, and the task then exits, dropping its handle on the backend.
pub const IDLE_CHECK: Duration = Duration::from_secs(1);

/// Renew calls in flight at once: 100,000 leases are 1,000 calls of [`RENEW_BATCH`], too many
/// round trips one after another to fit in a renewal period.
const RENEW_IN_FLIGHT: usize = 4;

/// A lease in flight in one renew call: (id, key, owner, lease).
type Pending = (u64, Arc<str>, OwnerToken, Duration);

#[derive(Default)]
struct State {
    entries: HashMap<u64, Entry>,
    next_id: u64,
    /// The epoch of the live watchdog task, if one runs.
    running: Option<u64>,
    next_epoch: u64,
    /// When the sleeping task wakes by itself; `None` while it is busy (it looks at the table
    /// again before it sleeps) or not running.
    alarm: Option<Instant>,
}

/// Clears the running mark when the task ends, however it ends (a runtime shut down drops it).
struct RunningMark {
    renewer: Renewer,
    epoch: u64,
}

impl Drop for RunningMark {
    fn drop(&mut self) {
        let mut st = self.renewer.lock();
        if st.running == Some(self.epoch) {
            st.running = None;
            st.alarm = None;
        }
    }
}

struct Shared {
    backend: Arc<dyn LockBackend>,
    state: Mutex<State>,
    wake: Notify,
}

/// Handle on the per-locker watchdog.
#[derive(Clone)]
pub(crate) struct Renewer {
    shared: Arc<Shared>,
}

impl fmt::Debug for Renewer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Renewer").field("leases", &self.lock().entries.len()).finish()
    }
}

/// A registered lease; deregisters on drop, which stops its renewal at once.
#[derive(Debug)]
pub(crate) struct Registration {
    renewer: Renewer,
    id: u64,
}

impl Drop for Registration {
    fn drop(&mut self) {
        // No wake-up: the task finds the table empty at its next alarm (within IDLE_CHECK).
        self.renewer.lock().entries.remove(&self.id);
    }
}

impl Registration {
    /// Record a renewal confirmed by the caller (a manual `renew`). The backend extends to
    /// the later of the old expiry and the new lease, so the local deadline does the same, and
    /// the watchdog keeps renewing with the longer of its lease and this one.
    pub fn confirmed(&self, sent_at: Instant, lease: Duration) {
        if let Some(e) = self.renewer.lock().entries.get_mut(&self.id) {
            e.lease = e.lease.max(lease);
            e.extend(sent_at, lease);
        }
        self.renewer.shared.wake.notify_one();
    }
}

impl Renewer {
    pub fn new(backend: Arc<dyn LockBackend>) -> Self {
        Renewer { shared: Arc::new(Shared { backend, state: Mutex::default(), wake: Notify::new() }) }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.shared.state.lock()
    }

    /// Number of leases being watched (for tests and metrics).
    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    /// Whether the watchdog task is alive.
    pub fn is_running(&self) -> bool {
        self.lock().running.is_some()
    }

    /// Watch `new`: its local deadline and first renewal are set here, from the send time of
    /// the granting request.
    pub fn register(&self, new: NewLease) -> Registration {
        // A grant shorter than asked (see `Grant::lease`) is renewed a third into what is left
        // of it locally, to the full lease, whether or not the watchdog renews this lease.
        let short = new.granted.filter(|g| new.early && *g < new.lease);
        let first = short.map_or(period(new.lease), |g| period(g.saturating_sub(new.margin)));
        let entry = Entry {
            confirmed_until: new.granted.map(|l| local_deadline(new.sent_at, l, new.margin)),
            next_due: new.sent_at + first,
            top_up: short.is_some() && !new.auto,
            key: new.key,
            owner: new.owner,
            lease: new.lease,
            auto: new.auto,
            margin: new.margin,
            renew_until: new.renew_until,
            signal: new.signal,
        };
        if let Some(d) = entry.confirmed_until {
            entry.signal.extend_deadline(d);
        }
        let event = entry.first_event();
        let mut st = self.lock();
        let id = st.next_id;
        st.next_id += 1;
        st.entries.insert(id, entry);
        // A sleeping task needs waking only if this lease is due before its alarm; a busy
        // one looks at the table again before it sleeps.
        let wake = matches!((st.alarm, event), (Some(a), Some(e)) if e < a);
        // A task that died with its runtime cleared its mark (RunningMark), so a `Locker` used
        // from a second runtime starts a new one there.
        let spawn = if st.running.is_none() {
            let epoch = st.next_epoch;
            st.next_epoch += 1;
            st.running = Some(epoch);
            Some(epoch)
        } else {
            None
        };
        drop(st);
        if let Some(epoch) = spawn {
            let mark = RunningMark { renewer: self.clone(), epoch };
            match tokio::runtime::Handle::try_current() {
                Ok(rt) => {
                    rt.spawn(async move { mark.renewer.clone().run(mark).await });
                }
                Err(_) => {
                    // Unreachable from the async API; without a runtime nothing can renew.
                    drop(mark);
                    tracing::error!("lock watchdog needs a tokio runtime; lease will not be renewed");
                }
            }
        }
        if wake {
            self.shared.wake.notify_one();
        }
        Registration { renewer: self.clone(), id }
    }

    async fn run(self, mark: RunningMark) {
        loop {
            let now = Instant::now();
            let (batch, wake_at, deadline) = {
                let mut st = self.lock();
                self.reap(&mut st, now);
                if st.entries.is_empty() {
                    st.running = None;
                    st.alarm = None;
                    drop(st);
                    drop(mark);
                    return;
                }
                let (batch, wake_at, deadline) = Self::due(&st, now);
                // Set under the same lock as the table was read: a lease registered after
                // this sees the alarm and wakes the task if it is due sooner.
                st.alarm = batch.is_empty().then_some(wake_at);
                (batch, wake_at, deadline)
            };
            if batch.is_empty() {
                tokio::select! {
                    // The first ready branch, not a random one: what a random pick could choose, the
                    // same every run, so a simulated run replays its seed (`history::sim`).
                    biased;
                    _ = tokio::time::sleep_until(wake_at) => {}
                    _ = self.shared.wake.notified() => {}
                }
                continue;
            }
            futures_util::stream::iter(batch.chunks(RENEW_BATCH))
                .for_each_concurrent(RENEW_IN_FLIGHT, |chunk| self.renew_chunk(chunk, deadline))
                .await;
            // A backend that answers at once (the in-process table) never makes this task wait:
            // behind on a large table, it would hold its worker thread for good, and the
            // application's tasks queued there with it.
            tokio::task::yield_now().await;
        }
    }

    /// Drop leases already lost and fire the ones whose deadline passed.
    fn reap(&self, st: &mut State, now: Instant) {
        st.entries.retain(|_, e| {
            if e.signal.is_marked() {
                return false;
            }
            if e.confirmed_until.is_some_and(|d| d <= now) {
                tracing::warn!(key = %e.key, "lock lease deadline passed without a confirmed renewal");
                e.signal.mark_lost(LostReason::DeadlinePassed);
                return false;
            }
            true
        });
    }

    /// Leases to renew now (coalescing those due soon), when to wake next, and the earliest
    /// local deadline of all (no renew call may wait past it: its lost signal must fire).
    /// One pass over the table per round, never one per renew call.
    fn due(st: &State, now: Instant) -> (Vec<u64>, Instant, Option<Instant>) {
        let mut batch = Vec::new();
        let mut wake_at = now + IDLE_CHECK;
        let mut deadline: Option<Instant> = None;
        for (id, e) in &st.entries {
            if let Some(d) = e.confirmed_until {
                wake_at = wake_at.min(d);
                deadline = Some(deadline.map_or(d, |x| x.min(d)));
            }
            let renewable = (e.auto || e.top_up) && e.renew_until.is_none_or(|u| now < u);
            if !renewable {
                continue;
            }
            if e.next_due <= now + coalesce_window(e.lease) {
                batch.push(*id);
            } else {
                wake_at = wake_at.min(e.next_due);
            }
        }
        (batch, wake_at, deadline)
    }

    /// Renew `ids`, waiting on the backend no later than `deadline` (the earliest local
    /// deadline when the round began) nor longer than a lease.
    async fn renew_chunk(&self, ids: &[u64], deadline: Option<Instant>) {
        let (items, limit): (Vec<Pending>, Instant) = {
            let st = self.lock();
            let items: Vec<Pending> = ids
                .iter()
                .filter_map(|id| st.entries.get(id).map(|e| (*id, e.key.clone(), e.owner, e.lease)))
                .collect();
            // Never wait on the backend past the earliest local deadline (a paused server must
            // not keep the lost signal from firing), nor longer than a lease.
            let longest = items.iter().map(|(.., lease)| *lease).max().unwrap_or_default();
            let cap = Instant::now() + longest;
            (items, deadline.map_or(cap, |l| l.min(cap)))
        };
        if items.is_empty() {
            return;
        }
        let req: Vec<RenewItem<'_>> = items
            .iter()
            .map(|(_, key, owner, lease)| RenewItem { key, owner: *owner, lease: *lease })
            .collect();
        let sent_at = Instant::now();
        let name = self.shared.backend.name();
        let span = tracing::debug_span!("dlock.renew", backend = name, leases = req.len());
        let call = self.shared.backend.renew(&req).instrument(span);
        let result = match tokio::time::timeout_at(limit, call).await {
            Ok(r) => r,
            Err(_) => Err(LockError::temporary(
                self.shared.backend.name(),
                "renewal timed out at the lease deadline",
            )),
        };
        // One unit of the task's cooperative budget per chunk: a batch of chunks answered at
        // once (see `run`) gives the worker thread back now and then.
        tokio::task::coop::consume_budget().await;
        let mut st = self.lock();
        match result {
            Ok(flags) if flags.len() == items.len() => {
                let renewed = flags.iter().filter(|held| **held).count();
                observe::renew(name, "renewed", renewed);
                observe::renew(name, "not_owner", flags.len() - renewed);
                for ((id, ..), held) in items.iter().zip(flags) {
                    let Some(e) = st.entries.get_mut(id) else { continue };
                    if held {
                        let lease = e.lease;
                        e.extend(sent_at, lease);
                        e.top_up = false;
                        tracing::trace!(key = %e.key, "lease renewed");
                    } else {
                        e.signal.mark_lost(LostReason::NotOwner);
                        st.entries.remove(id);
                    }
                }
            }
            Ok(flags) => {
                observe::renew(name, "error", items.len());
                tracing::error!(
                    sent = items.len(),
                    got = flags.len(),
                    "backend renew answered the wrong number of flags"
                );
                Self::failed(&mut st, &items, true);
            }
            Err(e) => {
                observe::renew(name, "error", items.len());
                tracing::debug!(error = %e, "lease renewal failed");
                Self::failed(&mut st, &items, !e.is_temporary());
            }
        }
    }

    fn failed(st: &mut State, items: &[Pending], permanent: bool) {
        let now = Instant::now();
        for (id, ..) in items {
            let Some(e) = st.entries.get_mut(id) else { continue };
            if permanent {
                e.signal.mark_lost(LostReason::BackendError);
                st.entries.remove(id);
            } else {
                // Unknown, not lost, until the deadline passes.
                e.signal.mark_uncertain();
                e.next_due = now + retry_interval(e.lease);
            }
        }
    }
}
