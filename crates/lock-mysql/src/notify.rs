//! In-process waiters of the optimistic mode: a lease row has no server-side queue and MySQL no
//! notifications, so waiters in one process queue here instead of polling the table. Every
//! optimistic `MySqlLock` of one lock space (`identity()`) in the process shares one [`Waiters`]:
//! only the head of a key's queue asks the database, the others wait for their turn; a release
//! through any of them wakes the head at once, and nobody else.
//!
//! Safety stays with the database (the conditional statements decide every grant): this is only
//! who asks when. A waiter in another process is not in this queue: it sees the key held and
//! its own process's head polls (see [`Waiters::hint`]).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use lock_core::OwnerToken;
use lock_core::backend::{Backoff, Mutex, NotifyHub, Subscription, jitter};
use tokio::time::Instant;

/// A queued waiter that has not come back this long after it was told to is gone without
/// leaving (its runtime shut down mid-wait): its place is given to the next.
const STALE_GRACE: Duration = Duration::from_secs(1);
/// A waiter behind the head looks at its place this often if no release names it: the most a
/// lost wake-up costs it (looking is local, nothing is sent).
const RECHECK: Duration = Duration::from_millis(250);
/// The head's first poll of a key held by another process, doubled per poll up to
/// [`REMOTE_POLL_MAX`]: a release there wakes nobody here.
const REMOTE_POLL_MIN: Duration = Duration::from_millis(2);
/// The head's longest poll of a key held by another process.
const REMOTE_POLL_MAX: Duration = Duration::from_millis(50);
/// At most this much is added to a wait until a lease's end, so the heads of several
/// processes do not all ask at the same instant.
const EXPIRY_JITTER: Duration = Duration::from_millis(20);

struct Place {
    owner: OwnerToken,
    /// After this the place is stale (see [`STALE_GRACE`]).
    due: Instant,
    /// The head's backoff while the key is held in another process.
    backoff: Backoff,
}

#[derive(Default)]
struct Key {
    queue: VecDeque<Place>,
    /// Holds granted here and not yet released: owner -> (nesting count, local lease bound).
    held: HashMap<OwnerToken, (u32, Instant)>,
}

impl Key {
    fn is_idle(&self) -> bool {
        self.queue.is_empty() && self.held.is_empty()
    }

    /// Drop stale places at the front; `true` if the head changed.
    fn prune_front(&mut self, now: Instant) -> bool {
        let mut changed = false;
        while self.queue.front().is_some_and(|p| p.due < now) {
            self.queue.pop_front();
            changed = true;
        }
        changed
    }
}

/// The waiters and local holders of one lock space in this process.
pub(crate) struct Waiters {
    hub: NotifyHub,
    keys: Mutex<HashMap<String, Key>>,
}

impl std::fmt::Debug for Waiters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Waiters").field("keys", &self.keys.lock().len()).finish()
    }
}

/// What the queue says to a queued acquisition before it asks the database.
pub(crate) enum Turn {
    /// Ask the database.
    Ask,
    /// Another waiter is ahead: wait until named (or this long).
    Wait(Duration),
}

fn remote_backoff() -> Backoff {
    Backoff::new(REMOTE_POLL_MIN, REMOTE_POLL_MAX)
}

impl Waiters {
    /// The waiters of lock space `identity`, shared with every other backend of it in the process.
    pub(crate) fn shared(identity: &str) -> Arc<Waiters> {
        static SPACES: OnceLock<Mutex<HashMap<String, Weak<Waiters>>>> = OnceLock::new();
        let mut spaces = SPACES.get_or_init(Mutex::default).lock();
        if let Some(w) = spaces.get(identity).and_then(Weak::upgrade) {
            return w;
        }
        spaces.retain(|_, w| w.strong_count() > 0);
        let w = Arc::new(Waiters { hub: NotifyHub::new(), keys: Mutex::default() });
        spaces.insert(identity.to_owned(), Arc::downgrade(&w));
        w
    }

    /// A release notification subscription for `key`.
    pub(crate) fn subscribe(&self, key: &str) -> Subscription {
        self.hub.subscribe(key).0
    }

    fn wake_head(&self, key: &str, k: &Key) {
        if let Some(head) = k.queue.front() {
            self.hub.notify_next(key, Some(&head.owner.to_string()));
        }
    }

    /// Before a queued attempt: the head (or a waiter of an empty queue, or a holder nesting)
    /// asks the database; anyone else keeps or takes a place at the back.
    pub(crate) fn turn(&self, key: &str, owner: OwnerToken) -> Turn {
        let now = Instant::now();
        let mut keys = self.keys.lock();
        let Some(k) = keys.get_mut(key) else { return Turn::Ask };
        if k.held.contains_key(&owner) {
            return Turn::Ask; // nesting: never queue behind one's own hold
        }
        if k.prune_front(now) {
            self.wake_head(key, k);
        }
        let due = now + RECHECK + STALE_GRACE;
        match k.queue.iter().position(|p| p.owner == owner) {
            Some(0) => Turn::Ask,
            None if k.queue.is_empty() => Turn::Ask,
            Some(i) => {
                k.queue[i].due = due;
                Turn::Wait(jitter(RECHECK / 2, RECHECK))
            }
            None => {
                k.queue.push_back(Place { owner, due, backoff: remote_backoff() });
                Turn::Wait(jitter(RECHECK / 2, RECHECK))
            }
        }
    }

    /// The database answered a queued attempt "held by `holder` for `left`": keep (or take) a
    /// place and say how long to sleep. A holder in this process wakes the head when it
    /// releases, so the head sleeps until the lease ends; a holder elsewhere is polled, backing
    /// off, never past the lease's end.
    pub(crate) fn hint(&self, key: &str, owner: OwnerToken, holder: OwnerToken, left: Duration) -> Duration {
        let now = Instant::now();
        let mut keys = self.keys.lock();
        let k = keys.entry(key.to_owned()).or_default();
        let i = match k.queue.iter().position(|p| p.owner == owner) {
            Some(i) => i,
            None => {
                k.queue.push_back(Place { owner, due: now, backoff: remote_backoff() });
                k.queue.len() - 1
            }
        };
        let nap = if i > 0 {
            jitter(RECHECK / 2, RECHECK)
        } else if k.held.contains_key(&holder) {
            left + jitter(Duration::ZERO, EXPIRY_JITTER)
        } else {
            k.queue[i].backoff.next_delay().min(left + jitter(Duration::ZERO, EXPIRY_JITTER))
        };
        k.queue[i].due = now + nap + STALE_GRACE;
        nap
    }

    /// `owner` was granted `key` (first hold or nesting) until at most `until`: out of the queue.
    pub(crate) fn granted(&self, key: &str, owner: OwnerToken, until: Instant) {
        let mut keys = self.keys.lock();
        let k = keys.entry(key.to_owned()).or_default();
        k.queue.retain(|p| p.owner != owner);
        let h = k.held.entry(owner).or_insert((0, until));
        h.0 += 1;
        h.1 = h.1.max(until);
    }

    /// `owner`'s lease of `key` was extended to at least `until` (so `prune` keeps the hold).
    pub(crate) fn renewed(&self, key: &str, owner: OwnerToken, until: Instant) {
        if let Some(h) = self.keys.lock().get_mut(key).and_then(|k| k.held.get_mut(&owner)) {
            h.1 = h.1.max(until);
        }
    }

    /// One hold of `owner` ended (`all`: every hold of it, the lease was found gone). When none
    /// is left, the head is woken: the key is free, or its lease is over.
    pub(crate) fn released(&self, key: &str, owner: OwnerToken, all: bool) {
        let mut keys = self.keys.lock();
        let Some(k) = keys.get_mut(key) else { return };
        let gone = match k.held.get_mut(&owner) {
            Some(h) if h.0 > 1 && !all => {
                h.0 -= 1;
                false
            }
            Some(_) => {
                k.held.remove(&owner);
                true
            }
            None => true,
        };
        if gone {
            self.wake_head(key, k);
            if k.is_idle() {
                keys.remove(key);
            }
        }
    }

    /// `key`'s hold was taken from its holder (force-unlock): every hold noted here goes, and
    /// the head is woken.
    pub(crate) fn evicted(&self, key: &str) {
        let mut keys = self.keys.lock();
        let Some(k) = keys.get_mut(key) else { return };
        k.held.clear();
        self.wake_head(key, k);
        if k.is_idle() {
            keys.remove(key);
        }
    }

    /// A queued acquisition of `owner` ended without a grant: its place goes, and if it was
    /// the head, the next is woken.
    pub(crate) fn leave(&self, key: &str, owner: OwnerToken) {
        let mut keys = self.keys.lock();
        let Some(k) = keys.get_mut(key) else { return };
        let was_head = k.queue.front().is_some_and(|p| p.owner == owner);
        k.queue.retain(|p| p.owner != owner);
        if was_head {
            self.wake_head(key, k);
        }
        if k.is_idle() {
            keys.remove(key);
        }
    }

    /// Forget holds whose lease ran out unreleased and places gone stale.
    pub(crate) fn prune(&self) {
        let now = Instant::now();
        let mut keys = self.keys.lock();
        for (key, k) in keys.iter_mut() {
            k.held.retain(|_, (_, until)| *until + STALE_GRACE > now);
            let before = k.queue.front().map(|p| p.owner);
            k.queue.retain(|p| p.due >= now);
            if k.queue.front().map(|p| p.owner) != before {
                self.wake_head(key, k);
            }
        }
        keys.retain(|_, k| !k.is_idle());
    }
}

#[cfg(test)]
mod tests {
    use futures_util::FutureExt;

    use super::*;

    #[tokio::test]
    async fn one_release_wakes_the_head_only() {
        let w = Waiters::shared("test://waiters/one_release_wakes_the_head_only");
        let (holder, a, b) = (OwnerToken::random(), OwnerToken::random(), OwnerToken::random());
        let far = Instant::now() + Duration::from_secs(60);
        w.granted("k", holder, far);
        // a asks and is told held: it is the head; b queues behind it without asking.
        assert!(matches!(w.turn("k", a), Turn::Ask));
        let nap = w.hint("k", a, holder, Duration::from_secs(10));
        assert!(nap >= Duration::from_secs(10), "a local holder wakes the head: sleep to the lease end");
        assert!(matches!(w.turn("k", b), Turn::Wait(_)));
        let (mut sa, mut sb) = (w.subscribe("k"), w.subscribe("k"));
        w.released("k", holder, false);
        let a_text = a.to_string();
        let b_text = b.to_string();
        assert!(sa.notified_for(&a_text).await);
        assert!(sb.notified_for(&b_text).now_or_never().is_none(), "the release named the head, not b");
        // a leaves without a grant: b is the head now and is woken.
        w.leave("k", a);
        assert!(sb.notified_for(&b_text).await);
        assert!(matches!(w.turn("k", b), Turn::Ask));
        w.granted("k", b, far);
        // A nesting by the holder never queues.
        assert!(matches!(w.turn("k", b), Turn::Ask));
    }

    #[test]
    fn a_remote_holder_is_polled_with_backoff_within_the_lease() {
        let w = Waiters::shared("test://waiters/remote");
        let (me, remote) = (OwnerToken::random(), OwnerToken::random());
        let first = w.hint("k", me, remote, Duration::from_secs(10));
        assert!(first <= REMOTE_POLL_MIN);
        for _ in 0..20 {
            assert!(w.hint("k", me, remote, Duration::from_secs(10)) <= REMOTE_POLL_MAX);
        }
        assert!(
            w.hint("k", me, remote, Duration::from_millis(1)) <= Duration::from_millis(1) + EXPIRY_JITTER
        );
    }
}
