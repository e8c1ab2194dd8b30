//! Hand-overs a waiter takes without a round trip (`scripts/handoff.lua`).
//!
//! A release grants the freed lock to the next registered waiter: a real hold, with a fence,
//! that expires after a short claim window `w`, and publishes `token:fence:w:deadline`. The
//! waiter's client noted, for each refused attempt of a waiter, the deadline it set and when
//! it was sent. The grant was made after an attempt that set `deadline` ran (the script read
//! it), so after that attempt was sent: the hold lasts at least until that send + `w`. The
//! waiter's next `try_acquire` then answers at once with the fence and what is left of that;
//! the core extends the hold to the lease asked for with a renewal. A hand-over heard for a
//! deadline this client did not note last (a message from an earlier wait, or one that
//! overtook the reply of the attempt it names) is not taken: the attempt claims the hold
//! instead, one round trip, as before.

use std::collections::HashMap;
use std::time::Duration;

use lock_core::OwnerToken;
use lock_core::backend::Mutex;
use tokio::time::Instant;

/// Owners noted at most: a table this full is swept of waits untouched for [`STALE`] (a waiter
/// that left without our hearing of it, a message for nobody).
const SWEEP_AT: usize = 4096;
/// A wait untouched this long has ended.
const STALE: Duration = Duration::from_secs(60);

/// A hand-over as published: the fence drawn for it, the claim window, the waiter deadline it
/// read (server milliseconds), and for a semaphore's permit its slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Handed {
    pub fence: u64,
    pub window: Duration,
    pub deadline: i64,
    pub slot: Option<u32>,
}

/// The length of an owner token in a payload (32 hex digits).
pub(crate) const TOKEN_LEN: usize = 32;

/// `token:fence:window:deadline[/slot][:rest]` as (owner, hand-over, rest): a permit's
/// hand-over names its slot after the deadline; `rest` is the lock's name on an inbox. `None`
/// for anything else (an empty payload: a release with nobody registered).
pub(crate) fn parse(payload: &str) -> Option<(OwnerToken, Handed, Option<&str>)> {
    let mut parts = payload.splitn(5, ':');
    let token = parts.next().filter(|t| t.len() == TOKEN_LEN)?;
    let owner = OwnerToken::parse(token)?;
    let fence = parts.next()?.parse().ok()?;
    let window = Duration::from_millis(parts.next()?.parse().ok()?);
    let field = parts.next()?;
    let (deadline, slot) = match field.split_once('/') {
        Some((deadline, slot)) => (deadline.parse().ok()?, Some(slot.parse().ok()?)),
        None => (field.parse().ok()?, None),
    };
    Some((owner, Handed { fence, window, deadline, slot }, parts.next()))
}

/// What this client knows of one owner on one key. Its steps are pure (the time is an
/// argument), so the protocol model (`model/`) takes them as the client does.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Entry {
    key: String,
    /// The waiter deadline the last refused attempt set, and when that attempt was sent.
    refused: Option<(i64, Instant)>,
    handed: Option<Handed>,
    /// The fence of a hand-over it took here and still holds: the server sees an attempt of
    /// this owner on the key that names it as a nesting, not a claim, and a leave as no reason
    /// to give the hold up. A stale fence (the hold was lost unseen) names no hold the server
    /// has, so it is harmless.
    taken: Option<u64>,
    touched: Instant,
}

impl Entry {
    pub(crate) fn new(key: &str) -> Self {
        Entry { key: key.to_owned(), refused: None, handed: None, taken: None, touched: Instant::now() }
    }

    /// See [`Handoffs::before`].
    pub(crate) fn before(&mut self, lease: Duration, may_take: bool, now: Instant) -> Before {
        let Some(handed) = self.handed.take() else { return Before::Send { taken: self.taken } };
        let left = match self.refused {
            Some((deadline, sent)) if may_take && deadline == handed.deadline && lease >= handed.window => {
                (sent + handed.window).checked_duration_since(now)
            }
            _ => None,
        };
        match left {
            Some(left) if left >= handed.window / 2 => {
                self.refused = None;
                self.taken = Some(handed.fence);
                Before::Take(handed.fence, left, handed.slot)
            }
            _ => Before::Send { taken: self.taken },
        }
    }

    /// A refused attempt sent at `sent` registered with `deadline` (see [`Handoffs::answered`]).
    pub(crate) fn refused(&mut self, deadline: i64, sent: Instant, now: Instant) {
        self.refused = Some((deadline, sent));
        self.touched = now;
    }

    /// A hand-over to this owner was heard (see [`Handoffs::handed`]).
    pub(crate) fn handed(&mut self, handed: Handed, now: Instant) {
        self.handed = Some(handed);
        self.touched = now;
    }

    /// See [`Handoffs::forget`].
    pub(crate) fn forget(&mut self) {
        self.refused = None;
        self.handed = None;
    }

    /// See [`Handoffs::released`].
    pub(crate) fn released(&mut self) {
        self.forget();
        self.taken = None;
    }

    /// See [`Handoffs::taken`].
    pub(crate) fn taken(&self) -> Option<u64> {
        self.taken
    }

    /// Whether a hand-over was heard and not yet looked at by an attempt.
    #[cfg(test)]
    pub(crate) fn has_hand_over(&self) -> bool {
        self.handed.is_some()
    }
}

/// What an attempt does before it is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Before {
    /// Hold the hand-over at once: its fence, how long it lasts from now, and a permit's slot.
    Take(u64, Duration, Option<u32>),
    /// Send the attempt; `taken`: the fence of a hand-over this owner took here.
    Send { taken: Option<u64> },
}

/// The hand-overs of one client, by owner (random per acquisition, so nearly always one key
/// each; a caller-chosen owner may wait on several), looked up without allocating.
#[derive(Debug, Default)]
pub(crate) struct Handoffs {
    owners: Mutex<HashMap<u128, Vec<Entry>>>,
}

impl Handoffs {
    /// Runs `f` on the entry of `owner` on `key`, made if `make`; drops it if `f` leaves it
    /// with nothing to remember.
    fn with<T>(
        &self,
        key: &str,
        owner: OwnerToken,
        make: bool,
        f: impl FnOnce(&mut Entry) -> T,
    ) -> Option<T> {
        let mut owners = self.owners.lock();
        if !make && owners.is_empty() {
            return None;
        }
        if make && owners.len() >= SWEEP_AT {
            let now = Instant::now();
            owners.retain(|_, es| {
                es.retain(|e| e.taken.is_some() || now.duration_since(e.touched) < STALE);
                !es.is_empty()
            });
        }
        let id = owner.as_u128();
        let entries = match owners.get_mut(&id) {
            Some(es) => es,
            None if make => owners.entry(id).or_default(),
            None => return None,
        };
        let i = match entries.iter().position(|e| e.key == key) {
            Some(i) => i,
            None if make => {
                entries.push(Entry::new(key));
                entries.len() - 1
            }
            None => return None,
        };
        let out = f(&mut entries[i]);
        let e = &entries[i];
        if e.taken.is_none() && e.refused.is_none() && e.handed.is_none() {
            entries.swap_remove(i);
            if entries.is_empty() {
                owners.remove(&id);
            }
        }
        Some(out)
    }

    /// Before an attempt of `owner` on `key` asking for `lease`: take the hold handed to it if
    /// one was heard for the deadline its last refused attempt set, at least half of its window
    /// is left, and `lease` is no shorter than the window (the server must not keep a short
    /// lease's hold longer than asked), unless the caller may not take one (`may_take`). A
    /// hand-over heard is consumed either way.
    pub(crate) fn before(&self, key: &str, owner: OwnerToken, lease: Duration, may_take: bool) -> Before {
        self.with(key, owner, false, |e| e.before(lease, may_take, Instant::now()))
            .unwrap_or(Before::Send { taken: None })
    }

    /// What an acquire script answered: a grant ends the wait; a refusal that registered
    /// (`deadline` > 0, set by an attempt sent at `sent`) is what a later hand-over to this
    /// waiter is checked against.
    pub(crate) fn answered(&self, key: &str, owner: OwnerToken, granted: bool, deadline: i64, sent: Instant) {
        if granted {
            self.forget(key, owner);
        } else if deadline > 0 {
            self.with(key, owner, true, |e| e.refused(deadline, sent, Instant::now()));
        }
    }

    /// A hand-over to `owner` on `key` was heard on this client's inbox (always one of its
    /// waiters; the message may come before the reply of the attempt it names).
    pub(crate) fn handed(&self, key: &str, owner: OwnerToken, handed: Handed) {
        self.with(key, owner, true, |e| e.handed(handed, Instant::now()));
    }

    /// As [`handed`](Self::handed), only if `owner` waits on `key` here (a release of this
    /// client, or a lock's channel, names any client's waiter).
    pub(crate) fn handed_if_waiting(&self, key: &str, owner: OwnerToken, handed: Handed) {
        self.with(key, owner, false, |e| e.handed(handed, Instant::now()));
    }

    /// The wait of `owner` on `key` ended (a grant, or it left): nothing noted for it stays
    /// but a hand-over it holds.
    pub(crate) fn forget(&self, key: &str, owner: OwnerToken) {
        self.with(key, owner, false, Entry::forget);
    }

    /// The fence of the hand-over `owner` took here on `key` and still holds, if any.
    pub(crate) fn taken(&self, key: &str, owner: OwnerToken) -> Option<u64> {
        self.with(key, owner, false, |e| e.taken()).flatten()
    }

    /// The hold of `owner` on `key` ended (its last release, or the server said it is not
    /// held): nothing about it stays.
    pub(crate) fn released(&self, key: &str, owner: OwnerToken) {
        self.with(key, owner, false, Entry::released);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: &str = "0123456789abcdef0123456789abcdef";

    fn owner() -> OwnerToken {
        OwnerToken::parse(T).expect("token")
    }

    #[test]
    fn payloads_parse() {
        let inbox = format!("{T}:42:1666:1700000000123:dlock:{{k}}");
        let (o, h, rest) = parse(&inbox).expect("inbox payload");
        assert_eq!(
            (o, h.fence, h.window, h.deadline),
            (owner(), 42, Duration::from_millis(1666), 1_700_000_000_123)
        );
        assert_eq!(o.to_string(), T, "the token as the scripts write it");
        assert_eq!(rest, Some("dlock:{k}"));
        assert_eq!(parse(&format!("{T}:1:2:3")).map(|p| p.2), Some(None));
        // A permit's slot follows the deadline, before the lock's name.
        let permit = format!("{T}:42:1666:1700000000123/2:dlock:{{k}}");
        let (_, h, rest) = parse(&permit).expect("permit");
        assert_eq!((h.deadline, h.slot, rest), (1_700_000_000_123, Some(2), Some("dlock:{k}")));
        assert_eq!(parse(&format!("{T}:1:2:3/4")).map(|p| (p.1.slot, p.2)), Some((Some(4), None)));
        let (x, two, slot) = (format!("{T}:x:2:3"), format!("{T}:1:2"), format!("{T}:1:2:3/x"));
        for bad in ["", T, "short:1:2:3", &x, &two, &slot] {
            assert!(parse(bad).is_none(), "{bad:?}");
        }
    }

    #[test]
    fn only_the_noted_deadline_is_taken() {
        let (h, o) = (Handoffs::default(), owner());
        let w = Duration::from_millis(300);
        let lease = Duration::from_secs(30);
        let send = Before::Send { taken: None };
        // Heard before any refused attempt was noted: not taken.
        h.handed("k", o, Handed { fence: 7, window: w, deadline: 10, slot: None });
        assert_eq!(h.before("k", o, lease, true), send);
        // Noted deadline 10, heard a hand-over naming 9 (an earlier wait): not taken.
        h.answered("k", o, false, 10, Instant::now());
        h.handed("k", o, Handed { fence: 7, window: w, deadline: 9, slot: None });
        assert_eq!(h.before("k", o, lease, true), send);
        // The matching one: what is left counts from the refused attempt's send.
        h.answered("k", o, false, 11, Instant::now() - Duration::from_millis(100));
        h.handed("k", o, Handed { fence: 8, window: w, deadline: 11, slot: None });
        let Before::Take(fence, left, _) = h.before("k", o, lease, true) else { panic!("not taken") };
        assert_eq!(fence, 8);
        assert!(left <= Duration::from_millis(200), "{left:?} counted from the send");
        // Held: a later attempt of this owner is a nesting, on this key only.
        assert_eq!(h.before("k", o, lease, true), Before::Send { taken: Some(8) });
        assert_eq!(h.taken("k", o), Some(8));
        // The end of another wait of this owner on the key leaves the taken hold noted.
        h.forget("k", o);
        assert_eq!(h.taken("k", o), Some(8));
        assert_eq!(h.before("other", o, lease, true), send);
        h.released("k", o);
        assert_eq!(h.before("k", o, lease, true), send);
        // Less than half the window left, or a lease shorter than the window: not taken, and
        // consumed.
        h.answered("k", o, false, 12, Instant::now() - Duration::from_millis(151));
        h.handed("k", o, Handed { fence: 9, window: w, deadline: 12, slot: None });
        assert_eq!(h.before("k", o, lease, true), send);
        h.answered("k", o, false, 13, Instant::now());
        h.handed("k", o, Handed { fence: 10, window: w, deadline: 13, slot: None });
        assert_eq!(h.before("k", o, Duration::from_millis(299), true), send);
        // A grant ends the wait: nothing is left behind.
        h.answered("k", o, true, 0, Instant::now());
        assert!(h.owners.lock().is_empty());
    }
}
