//! Which keys a backend lately found held, so that an attempt that may wait can join the
//! server's queue in its first round trip instead of trying first.
//!
//! A store that queues waiters (InnoDB row locks, PostgreSQL advisory locks) is asked in two
//! round trips by an `acquire()` that finds its key held: a try that fails, then the waiting
//! statement. On a key that is held most of the time, the try is wasted work for the server,
//! which under contention is the resource every holder's hand-over waits for. On a free key
//! the try is the cheaper statement, so it stays the first step there.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use crate::backend::AcquireRequest;

/// The shortest wait a server's queue is asked for: a server-side timeout of 0 means "no
/// limit" (PostgreSQL's `lock_timeout`, MariaDB's statement bounds), so a shorter one is sent
/// as a plain try, and the attempt answers "held".
pub const MIN_WAIT: Duration = Duration::from_millis(1);

/// `req`'s deadline, when it may still wait in a server's queue (at least [`MIN_WAIT`] left).
pub fn may_wait(req: &AcquireRequest<'_>) -> Option<Instant> {
    req.wait_until.filter(|d| d.saturating_duration_since(Instant::now()) >= MIN_WAIT)
}

/// Slots of the table. Keys share a slot by hash: a shared slot only makes a free key's attempt
/// skip its try for a while (a waiting statement costs a little more than a try), never wrong.
const SLOTS: usize = 256;

/// How long a key counts as held after an attempt last found it so. A key held all the time
/// still gets a try once per window (which fails and renews the mark), and a key that became
/// free goes back to trying first within it.
const WINDOW: Duration = Duration::from_secs(1);

/// Recently found-held keys, by hash, lock-free and of fixed size (no key is ever stored).
#[derive(Debug)]
pub struct Contended {
    start: Instant,
    /// Per slot: milliseconds after `start` plus one when a key of the slot was last found
    /// held; 0 for never.
    slots: Box<[AtomicU64]>,
}

impl Default for Contended {
    fn default() -> Self {
        Contended { start: Instant::now(), slots: (0..SLOTS).map(|_| AtomicU64::new(0)).collect() }
    }
}

impl Contended {
    /// An attempt found `key` held by someone else.
    pub fn found_held(&self, key: &str) {
        self.slot(key).store(self.now(), Ordering::Relaxed);
    }

    /// Whether an attempt found `key` held within the last second: a waiting attempt on it
    /// should join the server's queue at once.
    pub fn likely_held(&self, key: &str) -> bool {
        let seen = self.slot(key).load(Ordering::Relaxed);
        seen != 0 && self.now().saturating_sub(seen) < WINDOW.as_millis() as u64
    }

    /// `req`'s deadline when it should join the server's queue in its first round trip: it may
    /// wait ([`may_wait`]) and its key was lately found held.
    pub fn wait_at_once(&self, req: &AcquireRequest<'_>) -> Option<Instant> {
        may_wait(req).filter(|_| self.likely_held(req.key))
    }

    fn now(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX - 1) + 1
    }

    fn slot(&self, key: &str) -> &AtomicU64 {
        let mut h = DefaultHasher::new();
        key.hash(&mut h);
        // Truncation is the point: the slot index is the hash modulo the table size.
        &self.slots[(h.finish() as usize) % SLOTS]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_key_found_held_counts_as_held_for_a_window() {
        let c = Contended::default();
        assert!(!c.likely_held("a"), "never seen");
        c.found_held("a");
        assert!(c.likely_held("a"));
        // Only the keys that share its slot are marked with it (about 1 in SLOTS).
        let others = (0..SLOTS * 4).filter(|i| c.likely_held(&format!("k{i}"))).count();
        assert!(others <= 16, "{others} of {} other keys marked", SLOTS * 4);
        tokio::time::advance(WINDOW - Duration::from_millis(10)).await;
        assert!(c.likely_held("a"), "within the window");
        tokio::time::advance(Duration::from_millis(20)).await;
        assert!(!c.likely_held("a"), "the window has passed");
    }
}
