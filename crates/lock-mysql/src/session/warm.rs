//! Clean holding connections kept for the next acquisition (pessimistic mode).

use std::sync::Arc;
use std::time::Duration;

use lock_core::backend::Mutex;
use tokio::time::Instant;

use super::Pinned;

/// Clean holding connections kept for the next acquisition (pessimistic mode, whose holding
/// connections come from a private pool and carry the holder's session settings): taking one
/// skips the pool's checkout, and keeping it skips the ping sqlx sends on every return to a pool
/// (a round trip per release). A connection is only taken
/// while its session is far from the server's idle bound (`fresh`, counted from when its last
/// statement was sent); a sweeper hands older ones back to the pool (whose return ping restarts
/// the server's idle clock, or finds the session gone and closes the connection).
pub(crate) struct Warm {
    conns: Mutex<Vec<Pinned>>,
    fresh: Duration,
}

/// Clean connections kept at most: enough for a few clients taking turns; more go back to the pool.
const WARM_MAX: usize = 4;

impl Warm {
    /// Keep connections for `fresh` after their last statement's send, swept every half of that
    /// (the sweeper ends with the last reference). Needs a runtime.
    pub(crate) fn new(fresh: Duration) -> Arc<Self> {
        let warm = Arc::new(Warm { conns: Mutex::new(Vec::new()), fresh });
        let weak = Arc::downgrade(&warm);
        let every = (fresh / 2).max(Duration::from_millis(10));
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let Some(warm) = weak.upgrade() else { return };
                drop(warm.stale());
            }
        });
        warm
    }

    /// The connections past `fresh`, out of the stack (dropped outside its lock).
    fn stale(&self) -> Vec<Pinned> {
        let now = Instant::now();
        let mut conns = self.conns.lock();
        let (old, keep): (Vec<_>, Vec<_>) = conns.drain(..).partition(|p| p.ended + self.fresh <= now);
        *conns = keep;
        old
    }

    /// The most recently used fresh connection, now carrying (or about to carry) a hold.
    pub(crate) fn take(&self) -> Option<Pinned> {
        let now = Instant::now();
        let mut p = loop {
            let p = self.conns.lock().pop()?;
            if p.ended + self.fresh > now {
                break p;
            }
            // Older ones are below it on the stack: the sweeper's.
            drop(p);
        };
        p.dirty = true;
        Some(p)
    }

    /// Keep `p`, a connection whose hold ended cleanly, for the next acquisition.
    pub(crate) fn put(&self, p: Pinned) {
        if p.dirty {
            return;
        }
        let mut conns = self.conns.lock();
        if conns.len() < WARM_MAX {
            conns.push(p);
        }
    }
}
