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

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use lock_core::backend::Mutex;
use tokio::time::Instant;

/// Waiters noted at most: a table this full is swept of entries older than [`STALE`] (a
/// waiter that left without our hearing of it, a message for nobody).
const SWEEP_AT: usize = 4096;
/// An entry untouched this long belongs to a wait that ended.
const STALE: Duration = Duration::from_secs(60);

/// A hand-over as published: the fence drawn for it, the claim window, and the waiter deadline
/// it read (server milliseconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Handed {
    pub fence: u64,
    pub window: Duration,
    pub deadline: i64,
}

/// `token:fence:window:deadline[:rest]` as (token, hand-over, rest). `None` for anything else
/// (an empty payload: a release with nobody registered).
pub(crate) fn parse(payload: &str) -> Option<(&str, Handed, Option<&str>)> {
    let mut parts = payload.splitn(5, ':');
    let token = parts.next().filter(|t| t.len() == 32)?;
    let fence = parts.next()?.parse().ok()?;
    let window = Duration::from_millis(parts.next()?.parse().ok()?);
    let deadline = parts.next()?.parse().ok()?;
    Some((token, Handed { fence, window, deadline }, parts.next()))
}

#[derive(Debug)]
struct Waiting {
    /// The waiter deadline the last refused attempt set, and when that attempt was sent.
    refused: Option<(i64, Instant)>,
    handed: Option<Handed>,
    touched: Instant,
}

#[derive(Debug, Default)]
struct State {
    waiting: HashMap<(String, String), Waiting>,
    /// Holds taken from a hand-over and not released yet: an attempt of the same owner on the
    /// key is a nesting, not a claim of the handed hold.
    taken: HashSet<(String, String)>,
}

/// The hand-overs of one client, keyed by (user key, owner token).
#[derive(Debug, Default)]
pub(crate) struct Handoffs {
    state: Mutex<State>,
}

impl Handoffs {
    /// A registered attempt sent at `sent` was refused and set the waiter deadline `deadline`.
    pub(crate) fn refused(&self, key: &str, owner: &str, deadline: i64, sent: Instant) {
        let now = Instant::now();
        let mut st = self.state.lock();
        let w = st.waiting.entry((key.to_owned(), owner.to_owned())).or_insert(Waiting {
            refused: None,
            handed: None,
            touched: now,
        });
        w.refused = Some((deadline, sent));
        w.touched = now;
    }

    /// A hand-over to `owner` on `key` was heard.
    pub(crate) fn handed(&self, key: &str, owner: &str, handed: Handed) {
        let now = Instant::now();
        let mut st = self.state.lock();
        if st.waiting.len() >= SWEEP_AT {
            st.waiting.retain(|_, w| now.duration_since(w.touched) < STALE);
        }
        let w = st.waiting.entry((key.to_owned(), owner.to_owned())).or_insert(Waiting {
            refused: None,
            handed: None,
            touched: now,
        });
        w.handed = Some(handed);
        w.touched = now;
    }

    /// As [`handed`](Self::handed), only if `owner` waits on `key` here (a release of this
    /// client names any client's waiter).
    pub(crate) fn handed_if_waiting(&self, key: &str, owner: &str, handed: Handed) {
        let mut st = self.state.lock();
        if st.waiting.is_empty() {
            return;
        }
        if let Some(w) = st.waiting.get_mut(&(key.to_owned(), owner.to_owned())) {
            w.handed = Some(handed);
            w.touched = Instant::now();
        }
    }

    /// The hold handed to `owner` on `key`, if one was heard for the deadline its last refused
    /// attempt set, at least half of its window is left, and the `lease` asked for is no
    /// shorter than the window (the server must not keep a short lease's hold longer than
    /// asked): its fence and how long it lasts from now. The hand-over is consumed either way;
    /// a taken one is remembered until [`released`](Self::released).
    pub(crate) fn take(&self, key: &str, owner: &str, lease: Duration) -> Option<(u64, Duration)> {
        let mut st = self.state.lock();
        if st.waiting.is_empty() {
            return None;
        }
        let id = (key.to_owned(), owner.to_owned());
        let w = st.waiting.get_mut(&id)?;
        let handed = w.handed.take()?;
        let (deadline, sent) = w.refused?;
        if deadline != handed.deadline || lease < handed.window {
            return None;
        }
        let left = (sent + handed.window).checked_duration_since(Instant::now())?;
        if left < handed.window / 2 {
            return None;
        }
        st.waiting.remove(&id);
        st.taken.insert(id);
        Some((handed.fence, left))
    }

    /// Whether `owner` holds `key` by a hand-over it took here.
    pub(crate) fn is_taken(&self, key: &str, owner: &str) -> bool {
        let st = self.state.lock();
        !st.taken.is_empty() && st.taken.contains(&(key.to_owned(), owner.to_owned()))
    }

    /// The wait of `owner` on `key` ended (a grant, or it left): nothing noted stays.
    pub(crate) fn forget(&self, key: &str, owner: &str) {
        let mut st = self.state.lock();
        if !st.waiting.is_empty() {
            st.waiting.remove(&(key.to_owned(), owner.to_owned()));
        }
    }

    /// `owner` released `key` (or tried to): a hold taken from a hand-over is over.
    pub(crate) fn released(&self, key: &str, owner: &str) {
        let mut st = self.state.lock();
        if !st.taken.is_empty() {
            st.taken.remove(&(key.to_owned(), owner.to_owned()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: &str = "0123456789abcdef0123456789abcdef";

    #[test]
    fn payloads_parse() {
        let inbox = format!("{T}:42:1666:1700000000123:dlock:{{k}}");
        let (t, h, rest) = parse(&inbox).expect("inbox payload");
        assert_eq!(
            (t, h.fence, h.window, h.deadline),
            (T, 42, Duration::from_millis(1666), 1_700_000_000_123)
        );
        assert_eq!(rest, Some("dlock:{k}"));
        assert_eq!(parse(&format!("{T}:1:2:3")).map(|p| p.2), Some(None));
        let (x, two) = (format!("{T}:x:2:3"), format!("{T}:1:2"));
        for bad in ["", T, "short:1:2:3", &x, &two] {
            assert!(parse(bad).is_none(), "{bad:?}");
        }
    }

    #[test]
    fn only_the_noted_deadline_is_taken() {
        let h = Handoffs::default();
        let w = Duration::from_millis(300);
        let lease = Duration::from_secs(30);
        // Heard before any refused attempt was noted: not taken.
        h.handed("k", T, Handed { fence: 7, window: w, deadline: 10 });
        assert_eq!(h.take("k", T, lease), None);
        // Noted deadline 10, heard a hand-over naming 9 (an earlier wait): not taken.
        h.refused("k", T, 10, Instant::now());
        h.handed("k", T, Handed { fence: 7, window: w, deadline: 9 });
        assert_eq!(h.take("k", T, lease), None);
        // The matching one: what is left counts from the refused attempt's send.
        let sent = Instant::now() - Duration::from_millis(100);
        h.refused("k", T, 11, sent);
        h.handed("k", T, Handed { fence: 8, window: w, deadline: 11 });
        let (fence, left) = h.take("k", T, lease).expect("taken");
        assert_eq!(fence, 8);
        assert!(left <= Duration::from_millis(200), "{left:?} counted from the send");
        assert!(h.is_taken("k", T));
        h.released("k", T);
        assert!(!h.is_taken("k", T));
        // Less than half the window left, or a lease shorter than the window: not taken, and
        // consumed.
        h.refused("k", T, 12, Instant::now() - Duration::from_millis(151));
        h.handed("k", T, Handed { fence: 9, window: w, deadline: 12 });
        assert_eq!(h.take("k", T, lease), None);
        assert_eq!(h.take("k", T, lease), None);
        h.refused("k", T, 13, Instant::now());
        h.handed("k", T, Handed { fence: 10, window: w, deadline: 13 });
        assert_eq!(h.take("k", T, Duration::from_millis(299)), None);
    }
}
