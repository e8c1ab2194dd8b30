//! Clean holding connections kept for the next acquisition.
//!
//! A session-bound store holds a lock on a connection taken out of a pool for the hold's life.
//! Handing it back at release costs the pool's return check (sqlx pings every connection it
//! gets back: a round trip per release, on the server's time), and the next hold then starts
//! on a connection it knows nothing about: not the server session's id, which a waiting
//! statement needs first (to be cancelled from elsewhere when its caller gives up). A kept
//! connection skips the ping and carries what its last hold learnt.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::backend::Mutex;

/// A connection a [`Warm`] keeps: the bookkeeping every session-bound store needs, so that a
/// connection still carrying something of ours (a lock, a wait, an open transaction) is never
/// kept, and one handed out counts as carrying a hold until its end says otherwise.
pub trait Kept {
    /// `Some(sent)`: nothing of ours is left on its session since the statement sent at `sent`
    /// (the server's idle clock started no earlier). `None`: it must not be kept.
    fn clean_since(&self) -> Option<Instant>;

    /// Handed out for a hold: not clean until the hold's end says so.
    fn reuse(&mut self);
}

/// Connections kept at most: enough for a few clients taking turns; more go back to the pool.
pub const WARM_MAX: usize = 4;

/// A stack of clean connections, each with the instant its last statement was sent. One is
/// handed out only while that instant is within `fresh`: the server counts a session's idle
/// time from there (and may end it, or a proxy may drop it), and the pool's own checks are
/// skipped for a kept connection. A sweeper drops older ones, so they go back to their pool.
///
/// Nothing is kept or handed out while the pool is `pressed` (every connection out, so others
/// may be queued for one): a kept connection would go to whichever client asks next, past the
/// pool's queue, and the queued ones would starve (512 clients over pools of 32: fairness 0.02,
/// acquire-wait p99 2 s).
pub struct Warm<C> {
    conns: Mutex<Vec<(Instant, C)>>,
    fresh: Duration,
    pressed: Box<dyn Fn() -> bool + Send + Sync>,
}

impl<C: Kept + Send + 'static> Warm<C> {
    /// Keep connections for `fresh` after their last statement's send, swept every half of that
    /// (the sweeper ends with the last reference), except while `pressed` says that the pool
    /// has no connection left to hand out. Needs a runtime.
    pub fn new(fresh: Duration, pressed: impl Fn() -> bool + Send + Sync + 'static) -> Arc<Self> {
        let warm = Arc::new(Warm { conns: Mutex::new(Vec::new()), fresh, pressed: Box::new(pressed) });
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

    /// The connections past `fresh`, out of the stack (dropped by the caller, outside the lock:
    /// dropping one may hand it back to its pool).
    fn stale(&self) -> Vec<C> {
        let now = Instant::now();
        let mut conns = self.conns.lock();
        let (old, keep): (Vec<_>, Vec<_>) = conns.drain(..).partition(|(sent, _)| *sent + self.fresh <= now);
        *conns = keep;
        old.into_iter().map(|(_, c)| c).collect()
    }

    /// The most recently used fresh connection, if any, marked as carrying a hold ([`Kept::reuse`]);
    /// none while the pool is pressed (the kept ones go back to it, for the clients queued
    /// there).
    pub fn take(&self) -> Option<C> {
        let mut c = self.take_fresh()?;
        c.reuse();
        Some(c)
    }

    fn take_fresh(&self) -> Option<C> {
        if (self.pressed)() {
            let kept = std::mem::take(&mut *self.conns.lock());
            drop(kept);
            return None;
        }
        let now = Instant::now();
        loop {
            let (sent, c) = self.conns.lock().pop()?;
            if sent + self.fresh > now {
                return Some(c);
            }
            // Older ones are below it on the stack: the sweeper's.
            drop(c);
        }
    }

    /// Keep `c` if it is clean ([`Kept::clean_since`]). Else, beyond [`WARM_MAX`], or while the
    /// pool is pressed, it is dropped (its own drop closes it or hands it back to its pool).
    pub fn put(&self, c: C) {
        let Some(sent) = c.clean_since() else { return drop(c) };
        if (self.pressed)() {
            drop(c);
            return;
        }
        let mut conns = self.conns.lock();
        if conns.len() < WARM_MAX && sent + self.fresh > Instant::now() {
            conns.push((sent, c));
            return;
        }
        drop(conns);
        drop(c);
    }
}

impl<C> std::fmt::Debug for Warm<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Warm").field("fresh", &self.fresh).finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A test connection: a name, what it carries, and when it was last clean.
    #[derive(Debug, PartialEq)]
    struct Conn<T>(T, Option<Instant>);

    impl<T> Kept for Conn<T> {
        fn clean_since(&self) -> Option<Instant> {
            self.1
        }
        fn reuse(&mut self) {
            self.1 = None;
        }
    }

    fn clean<T>(t: T, sent: Instant) -> Conn<T> {
        Conn(t, Some(sent))
    }

    #[tokio::test(start_paused = true)]
    async fn the_latest_fresh_connection_is_handed_out_and_stale_ones_never() {
        let warm = Warm::new(Duration::from_millis(300), || false);
        let t0 = Instant::now();
        warm.put(clean("old", t0));
        tokio::time::advance(Duration::from_millis(200)).await;
        warm.put(clean("new", Instant::now()));
        assert_eq!(warm.take(), Some(Conn("new", None)), "the most recently used first, taken for a hold");
        warm.put(clean("new", Instant::now()));
        tokio::time::advance(Duration::from_millis(150)).await;
        // "old" is 350 ms past its last send: never handed out, even when it is the only one.
        assert_eq!(warm.take().map(|c| c.0), Some("new"));
        assert_eq!(warm.take(), None, "the stale one is dropped, not handed out");
        for i in 0..WARM_MAX + 2 {
            warm.put(clean("x", Instant::now() - Duration::from_millis(i as u64)));
        }
        assert_eq!(warm.conns.lock().len(), WARM_MAX, "kept at most WARM_MAX");
        warm.put(clean("late", Instant::now() - Duration::from_millis(400)));
        assert_eq!(warm.conns.lock().len(), WARM_MAX, "a connection already past fresh is not kept");
        let _ = warm.take();
        warm.put(Conn("dirty", None));
        assert_eq!(warm.conns.lock().len(), WARM_MAX - 1, "a connection carrying something is not kept");
    }

    #[tokio::test(start_paused = true)]
    async fn the_sweeper_hands_stale_connections_back() {
        let warm = Warm::new(Duration::from_millis(100), || false);
        let dropped = Arc::new(());
        warm.put(clean(dropped.clone(), Instant::now()));
        assert_eq!(Arc::strong_count(&dropped), 2);
        tokio::time::sleep(Duration::from_millis(160)).await;
        assert!(warm.conns.lock().is_empty(), "swept");
        assert_eq!(Arc::strong_count(&dropped), 1, "dropped, so back in its pool");
    }

    #[tokio::test]
    async fn a_pressed_pool_gets_its_connections_back() {
        let pressed = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let p = pressed.clone();
        let warm = Warm::new(Duration::from_secs(10), move || p.load(std::sync::atomic::Ordering::Relaxed));
        let (a, b) = (Arc::new(()), Arc::new(()));
        warm.put(clean(a.clone(), Instant::now()));
        pressed.store(true, std::sync::atomic::Ordering::Relaxed);
        warm.put(clean(b.clone(), Instant::now()));
        assert_eq!(Arc::strong_count(&b), 1, "not kept while the pool is pressed");
        assert!(warm.take().is_none(), "none handed out past the pool's queue");
        assert_eq!(Arc::strong_count(&a), 1, "the kept one went back to the pool");
        pressed.store(false, std::sync::atomic::Ordering::Relaxed);
        warm.put(clean(b.clone(), Instant::now()));
        assert!(warm.take().is_some());
    }
}
