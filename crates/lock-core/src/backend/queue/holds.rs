//! The hold table of a queue store: every hold of one client, on the session or lease that all
//! of them share, keyed by (key, owner).

use std::collections::HashMap;
use std::fmt;

use tokio::task::AbortHandle;

use crate::backend::{Mutex, Side};
use crate::{LeaseSignal, LostReason, OwnerToken};

/// A hold's place in the table: the lock's key and the owner token of its acquisitions.
pub type HoldKey = (String, OwnerToken);

/// One held lock (reentrant holds of one owner share it).
#[derive(Debug)]
pub struct QueueHold {
    /// The store's name of the hold's entry (an etcd key, a ZooKeeper node's path): unique to
    /// the acquisition, so nothing done by this name can reach a later hold.
    pub name: String,
    /// The entry's creation number in the store's total order (a create revision, a czxid):
    /// the fencing token, and what a conditional delete compares.
    pub fence: i64,
    /// Acquisitions of this hold not yet released.
    pub count: u32,
    /// The session or lease the entry lives on.
    pub generation: u64,
    /// The lost signal of every acquisition of this hold: nested ones taken through another
    /// `Locker` come with their own, and each must hear of a loss.
    pub signals: Vec<LeaseSignal>,
    /// A task watching the entry while held, if the store runs one; stopped when the hold
    /// leaves the table through [`QueueHolds`].
    pub watch: Option<AbortHandle>,
    /// A reader's hold ([`Side::Read`]): it takes no note, since readers are many and a note
    /// is read from the head of the queue. A permit ([`Side::Permit`]) is one holder's entry,
    /// so it takes its holder's note.
    pub reader: bool,
}

impl QueueHold {
    /// The first acquisition's hold of entry `name`, created as number `fence` on session
    /// `generation`.
    pub fn new(name: String, fence: i64, generation: u64, signal: &LeaseSignal) -> QueueHold {
        let signals = vec![signal.clone()];
        QueueHold { name, fence, count: 1, generation, signals, watch: None, reader: false }
    }

    /// The same hold, of the kind `side` asked for.
    pub fn of_side(mut self, side: Side) -> QueueHold {
        self.reader = matches!(side, Side::Read);
        self
    }

    /// Whether any of its guards was told the hold is lost.
    pub fn is_lost(&self) -> bool {
        self.signals.iter().any(LeaseSignal::is_lost)
    }

    /// Tell every guard the hold is lost.
    pub fn mark_lost(&self, reason: LostReason) {
        self.signals.iter().for_each(|s| s.mark_lost(reason));
    }

    /// Tell every guard the hold may be lost (its session is not confirmed).
    pub fn mark_uncertain(&self) {
        self.signals.iter().for_each(LeaseSignal::mark_uncertain);
    }

    /// Tell every guard the hold is confirmed again.
    pub fn mark_held(&self) {
        self.signals.iter().for_each(LeaseSignal::mark_held);
    }

    /// Stop watching the entry (before deleting it ourselves, or once the hold is over).
    pub fn stop_watch(&mut self) {
        if let Some(w) = self.watch.take() {
            w.abort();
        }
    }
}

/// What [`QueueHolds::nest`] found.
#[derive(Debug)]
pub enum Nest {
    /// The owner holds the key: one acquisition more, with this fence.
    Nested(i64),
    /// The owner's hold was told lost by the core (a refused renewal), not by the store: out of
    /// the table now, since no release will come for it; its entry must be deleted, or it
    /// would stay queued ahead of the new attempt.
    Lost(QueueHold),
    /// No hold of the owner: a new attempt.
    Free,
}

/// What [`QueueHolds::release`] found.
#[derive(Debug)]
pub enum Released {
    /// No hold of that owner here.
    NotHeld,
    /// One nesting less; the hold stays.
    Nested,
    /// The last acquisition (or a lost hold): out of the table, its entry is the caller's to
    /// delete.
    Ended(QueueHold),
}

/// The holds of one client of a queue store: nesting without a round trip, every guard's
/// signal, and the holds of one session at a time told uncertain, held or lost.
#[derive(Default)]
pub struct QueueHolds(Mutex<HashMap<HoldKey, QueueHold>>);

impl fmt::Debug for QueueHolds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QueueHolds").field("held", &self.len()).finish()
    }
}

impl QueueHolds {
    /// How many locks are held (reentrant holds count once).
    pub fn len(&self) -> usize {
        self.0.lock().len()
    }

    /// Whether no lock is held.
    pub fn is_empty(&self) -> bool {
        self.0.lock().is_empty()
    }

    /// A nested acquisition by a current holder.
    pub fn nest(&self, key: &str, owner: OwnerToken, signal: &LeaseSignal) -> Nest {
        let mut holds = self.0.lock();
        let hk = (key.to_owned(), owner);
        let Some(h) = holds.get_mut(&hk) else { return Nest::Free };
        if h.is_lost() {
            return holds.remove(&hk).map_or(Nest::Free, |mut old| {
                old.stop_watch();
                Nest::Lost(old)
            });
        }
        h.count += 1;
        // Nesting through the same `Locker` brings the hold's own signal again: keep one copy,
        // so a long hold nested in a loop does not grow. (A release does not say which guard
        // it ends, so a signal from another `Locker` stays until the hold ends.)
        if !h.signals.iter().any(|s| s.same_as(signal)) {
            if let Some(first) = h.signals.first() {
                signal.kept_as(first);
            }
            h.signals.push(signal.clone());
        }
        Nest::Nested(h.fence)
    }

    /// Record a grant. `start_watch` runs with the hold already in the table and the table
    /// still locked, so a watch task it starts finds the hold at its first look. Returns the
    /// hold it replaced (only a lost one can be: a live one nests), its watch stopped; its entry
    /// is the caller's to delete.
    pub fn insert(
        &self,
        key: &str,
        owner: OwnerToken,
        hold: QueueHold,
        start_watch: impl FnOnce() -> Option<AbortHandle>,
    ) -> Option<QueueHold> {
        let hk = (key.to_owned(), owner);
        let mut holds = self.0.lock();
        let old = holds.insert(hk.clone(), hold);
        let watch = start_watch();
        if let Some(h) = holds.get_mut(&hk) {
            h.watch = watch;
        }
        old.map(|mut old| {
            old.stop_watch();
            old
        })
    }

    /// A release by `owner`: one nesting less, or the hold out of the table (its watch still
    /// running: the caller stops it when its delete is answered).
    pub fn release(&self, key: &str, owner: OwnerToken) -> Released {
        let mut holds = self.0.lock();
        let hk = (key.to_owned(), owner);
        match holds.get_mut(&hk) {
            None => Released::NotHeld,
            Some(h) if h.count > 1 && !h.is_lost() => {
                h.count -= 1;
                Released::Nested
            }
            Some(_) => holds.remove(&hk).map_or(Released::NotHeld, Released::Ended),
        }
    }

    /// `f` of `owner`'s hold of `key`, if there is one.
    pub fn get<T>(&self, key: &str, owner: OwnerToken, f: impl FnOnce(&QueueHold) -> Option<T>) -> Option<T> {
        self.0.lock().get(&(key.to_owned(), owner)).and_then(f)
    }

    /// `f` of `owner`'s hold of `key` if a note can go with it: a live exclusive hold.
    pub fn for_note<T>(
        &self,
        key: &str,
        owner: OwnerToken,
        f: impl FnOnce(&QueueHold) -> Option<T>,
    ) -> Option<T> {
        self.0.lock().get(&(key.to_owned(), owner)).filter(|h| !h.reader && !h.is_lost()).and_then(f)
    }

    /// `f` of every hold of session `generation`, with its place in the table, under the
    /// table's lock.
    pub fn each_of<T>(
        &self,
        generation: u64,
        mut f: impl FnMut(&HoldKey, &QueueHold) -> Option<T>,
    ) -> Vec<T> {
        self.0
            .lock()
            .iter()
            .filter(|(_, h)| h.generation == generation)
            .filter_map(|(k, h)| f(k, h))
            .collect()
    }

    /// `f` of every hold of session `generation` (to tell its guards), under the table's lock.
    pub fn each(&self, generation: u64, f: impl Fn(&QueueHold)) {
        self.0.lock().values().filter(|h| h.generation == generation).for_each(f);
    }

    /// Whether session `generation` holds anything.
    pub fn has(&self, generation: u64) -> bool {
        self.0.lock().values().any(|h| h.generation == generation)
    }

    /// Whether the hold `hk` is still in the table with its entry `name`.
    pub fn holds_name(&self, hk: &HoldKey, name: &str) -> bool {
        self.0.lock().get(hk).is_some_and(|h| h.name == name)
    }

    /// Take every hold of session `generation` out of the table, telling each of its guards
    /// (outside the table's lock: a guard woken by the loss finds the table clean). Their
    /// entries are returned for the caller to delete, where its session may still live.
    pub fn take(&self, generation: u64, reason: LostReason) -> Vec<QueueHold> {
        let taken: Vec<QueueHold> = {
            let mut holds = self.0.lock();
            let keys: Vec<HoldKey> =
                holds.iter().filter(|(_, h)| h.generation == generation).map(|(k, _)| k.clone()).collect();
            keys.iter().filter_map(|k| holds.remove(k)).collect()
        };
        taken
            .into_iter()
            .map(|mut h| {
                h.stop_watch();
                h.mark_lost(reason);
                h
            })
            .collect()
    }

    /// The hold `hk` with entry `name` is lost: out of the table first (no release follows),
    /// then every guard is told, so a guard woken by the loss finds the table clean. A later
    /// grant to the same owner has another entry and is left alone.
    pub fn lose(&self, hk: &HoldKey, name: &str, reason: LostReason) {
        let hold = {
            let mut holds = self.0.lock();
            if holds.get(hk).is_some_and(|h| h.name == name) { holds.remove(hk) } else { None }
        };
        if let Some(mut h) = hold {
            h.stop_watch();
            h.mark_lost(reason);
        }
    }
}
