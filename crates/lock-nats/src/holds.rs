//! The holds of one client: nesting, every guard's lost signal, and the key's current
//! revision, which every write of the hold compares.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use std::time::Duration;

use lock_core::backend::queue::span;
use lock_core::backend::{Confirmed, Mutex};
use lock_core::{DRIFT_MARGIN_FLOOR, DRIFT_MARGIN_RATE, LeaseSignal, LostReason, OwnerToken};
use tokio::time::Instant;

use crate::keys::Value;

/// A hold's place in the table: the lock's key and the owner token of its acquisitions.
type HoldKey = (String, OwnerToken);

/// What a hold's writes compare and carry: kept behind an async lock, so that a renewal, a
/// note and a release of one hold never race each other's compare-and-set.
#[derive(Debug)]
pub(crate) struct Written {
    /// The key's last revision as this hold wrote it.
    pub revision: u64,
    /// Writes of this hold so far: the message id of the next is `<nonce>.<writes>`.
    pub writes: u64,
    /// The value every write stores (the note included).
    pub value: Value,
}

impl Written {
    /// The message id of the next write, and the value it stores.
    pub fn next_id(&mut self) -> String {
        self.writes += 1;
        format!("{:016x}.{}", self.value.nonce, self.writes)
    }
}

/// One held lock (nested acquisitions of one owner share it).
#[derive(Debug)]
pub(crate) struct Hold {
    pub fence: u64,
    /// The granting attempt's nonce, in every value the hold writes.
    pub nonce: u64,
    pub written: tokio::sync::Mutex<Written>,
    state: Mutex<State>,
    /// When the hold's lease ends.
    deadline: Mutex<Instant>,
    /// The send time of the hold's last write the server stored: it keeps the key a TTL after
    /// that at least.
    confirmed: Confirmed,
    /// How long the server surely keeps the key after a write's send: the bucket's TTL less
    /// the drift margin.
    kept: Duration,
    /// The keeper has a write of this hold in flight.
    keeping: AtomicBool,
}

/// How long the server surely keeps a key after the send of its last write, by this machine's
/// clock: `ttl` less the drift margin for the two clocks' rates.
pub(crate) fn kept_for(ttl: Duration) -> Duration {
    span(ttl, (DRIFT_MARGIN_RATE, DRIFT_MARGIN_FLOOR))
}

/// When the hold's lease ends, and when the last write the server confirmed was sent: the
/// server keeps the key until at least that send plus the TTL.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timing {
    pub deadline: Instant,
    pub confirmed: Instant,
}

#[derive(Debug)]
struct State {
    count: u32,
    signals: Vec<LeaseSignal>,
}

impl Hold {
    /// The hold granted by a create with `revision`, sent at `sent` for `lease`, in a bucket of
    /// `ttl`.
    pub fn new(
        revision: u64,
        value: Value,
        signal: &LeaseSignal,
        sent: Instant,
        (lease, ttl): (Duration, Duration),
    ) -> Arc<Hold> {
        let value = Value { fence: Some(revision), ..value };
        let (confirmed, kept) = (Confirmed::new(sent), kept_for(ttl));
        signal.kept_by(&confirmed, kept);
        Arc::new(Hold {
            fence: revision,
            nonce: value.nonce,
            written: tokio::sync::Mutex::new(Written { revision, writes: 0, value }),
            state: Mutex::new(State { count: 1, signals: vec![signal.clone()] }),
            deadline: Mutex::new(sent + lease),
            confirmed,
            kept,
            keeping: AtomicBool::new(false),
        })
    }

    /// Whether the keeper may start a write of this hold (none is in flight).
    pub fn start_keeping(&self) -> bool {
        !self.keeping.swap(true, Ordering::AcqRel)
    }

    pub fn stop_keeping(&self) {
        self.keeping.store(false, Ordering::Release);
    }

    pub fn timing(&self) -> Timing {
        Timing { deadline: *self.deadline.lock(), confirmed: self.confirmed.at() }
    }

    /// A write sent at `sent` was stored; with `lease`, the lease now runs to at least
    /// `sent + lease` (a lease is only ever extended). The guards, tied to `confirmed`, read
    /// the hold lost `kept` after its last confirmed send even if the keeper, which would tell
    /// them, has not run.
    pub fn confirm(&self, sent: Instant, lease: Option<Duration>) {
        self.confirmed.confirm(sent);
        if let Some(lease) = lease {
            let mut d = self.deadline.lock();
            *d = (*d).max(sent + lease);
        }
    }

    /// Tell every guard the hold may be lost (a keeper's write went unanswered).
    pub fn mark_uncertain(&self) {
        self.state.lock().signals.iter().for_each(LeaseSignal::mark_uncertain);
    }

    /// Tell every guard the hold is confirmed again.
    pub fn mark_held(&self) {
        self.state.lock().signals.iter().for_each(LeaseSignal::mark_held);
    }

    /// Whether any of its guards was told the hold is lost.
    pub fn is_lost(&self) -> bool {
        self.state.lock().signals.iter().any(LeaseSignal::is_lost)
    }

    /// Tell every guard the hold is lost.
    pub fn mark_lost(&self, reason: LostReason) {
        self.state.lock().signals.iter().for_each(|s| s.mark_lost(reason));
    }
}

/// What [`Holds::release`] found.
pub(crate) enum Released {
    NotHeld,
    Nested,
    /// The last acquisition (or a lost hold): out of the table, its key the caller's to delete.
    Ended(Arc<Hold>),
}

/// Every hold of one client.
#[derive(Debug, Default)]
pub(crate) struct Holds(Mutex<HashMap<HoldKey, Arc<Hold>>>);

impl Holds {
    /// Every hold, for the keeper.
    pub fn all(&self) -> Vec<(String, Arc<Hold>)> {
        self.0.lock().iter().map(|((k, _), h)| (k.clone(), h.clone())).collect()
    }

    /// Take out of the table every hold whose guards were all told it is lost: the core sends
    /// no release for a lost guard, so without this a hold lost and never acquired again by
    /// its owner would stay for good. Its key is left to the server's TTL: deleting it would
    /// let a successor in before the drift margin the holder was promised has passed.
    pub fn drop_lost(&self) {
        self.0.lock().retain(|_, h| !h.state.lock().signals.iter().all(LeaseSignal::is_lost));
    }

    pub fn len(&self) -> usize {
        self.0.lock().len()
    }

    /// The owner's live hold of `key`; a lost one is taken out of the table (no release will
    /// come for it from a new acquisition) and returned as `Err` for its key to be deleted.
    pub fn live(&self, key: &str, owner: OwnerToken) -> Result<Option<Arc<Hold>>, Arc<Hold>> {
        let mut holds = self.0.lock();
        let hk = (key.to_owned(), owner);
        match holds.get(&hk) {
            None => Ok(None),
            Some(h) if h.is_lost() => Err(holds.remove(&hk).expect("present")),
            Some(h) => Ok(Some(h.clone())),
        }
    }

    /// The owner's hold of `key`, lost or not.
    pub fn get(&self, key: &str, owner: OwnerToken) -> Option<Arc<Hold>> {
        self.0.lock().get(&(key.to_owned(), owner)).cloned()
    }

    /// One acquisition more of `hold`, with its own signal (kept once per signal).
    pub fn nest(&self, hold: &Hold, signal: &LeaseSignal) {
        let mut s = hold.state.lock();
        s.count += 1;
        if !s.signals.iter().any(|x| x.same_as(signal)) {
            signal.kept_by(&hold.confirmed, hold.kept);
            s.signals.push(signal.clone());
        }
    }

    pub fn insert(&self, key: &str, owner: OwnerToken, hold: Arc<Hold>) {
        self.0.lock().insert((key.to_owned(), owner), hold);
    }

    /// Take `hold`, found lost, out of the table (if it is still the owner's entry).
    pub fn release_lost(&self, key: &str, owner: OwnerToken, hold: &Arc<Hold>) {
        let mut holds = self.0.lock();
        let hk = (key.to_owned(), owner);
        if holds.get(&hk).is_some_and(|h| Arc::ptr_eq(h, hold)) {
            holds.remove(&hk);
        }
    }

    /// A release by `owner`: one nesting less, or the hold out of the table.
    pub fn release(&self, key: &str, owner: OwnerToken) -> Released {
        let mut holds = self.0.lock();
        let hk = (key.to_owned(), owner);
        let Some(h) = holds.get(&hk) else { return Released::NotHeld };
        {
            let mut s = h.state.lock();
            if s.count > 1 && !s.signals.iter().any(LeaseSignal::is_lost) {
                s.count -= 1;
                return Released::Nested;
            }
        }
        holds.remove(&hk).map_or(Released::NotHeld, Released::Ended)
    }
}
