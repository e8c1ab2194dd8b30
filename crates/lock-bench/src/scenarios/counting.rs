//! A decorator over a target's backend that counts what reaches it: acquisition attempts
//! (`try_acquire` calls, so wake-ups show as attempts per acquisition), subscriptions (so the
//! attempts that follow a wake-up can be told from the first attempt and the one after
//! subscribing) and renewals (calls and items). It is lock-core's fault wrapper with a counting
//! hook and no fault armed, so every request goes on unchanged, on the same `dyn` path users
//! take.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use dlock::DynBackend;
use dlock::faults::{FaultyBackend, Op};

/// The counters a [`Counting`] backend's hook adds to.
#[derive(Debug, Default)]
struct Counts {
    attempts: AtomicU64,
    subscribes: AtomicU64,
    renew_calls: AtomicU64,
    renew_items: AtomicU64,
}

/// Counts calls going to the backend it wraps.
#[derive(Debug)]
pub struct Counting {
    backend: DynBackend,
    counts: Arc<Counts>,
}

impl Counting {
    /// Wrap `inner`, every counter at zero.
    pub fn new(inner: DynBackend) -> Arc<Self> {
        let counts = Arc::new(Counts::default());
        let seen = counts.clone();
        let (backend, faults) = FaultyBackend::wrap(inner);
        faults.before_each(move |op, items| {
            match op {
                Op::TryAcquire => seen.attempts.fetch_add(1, Ordering::Relaxed),
                Op::Subscribe => seen.subscribes.fetch_add(1, Ordering::Relaxed),
                Op::Renew => {
                    seen.renew_items.fetch_add(items as u64, Ordering::Relaxed);
                    seen.renew_calls.fetch_add(1, Ordering::Relaxed)
                }
                _ => 0,
            };
            Ok(())
        });
        Arc::new(Counting { backend: Arc::new(backend), counts })
    }

    /// The counting backend, to build a `Locker` on.
    pub fn backend(&self) -> DynBackend {
        self.backend.clone()
    }

    /// `try_acquire` calls so far.
    pub fn attempts(&self) -> u64 {
        self.counts.attempts.load(Ordering::Relaxed)
    }

    /// `subscribe` calls so far.
    pub fn subscribes(&self) -> u64 {
        self.counts.subscribes.load(Ordering::Relaxed)
    }

    /// `renew` calls and the items they carried so far.
    pub fn renewals(&self) -> (u64, u64) {
        (self.counts.renew_calls.load(Ordering::Relaxed), self.counts.renew_items.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use dlock::{Locker, MemoryBackend};

    use super::Counting;

    #[tokio::test]
    async fn every_attempt_reaching_the_backend_is_counted_once() -> Result<(), Box<dyn std::error::Error>> {
        let counting = Counting::new(Arc::new(MemoryBackend::new()));
        let l = Locker::new(counting.backend());
        let lease = Duration::from_secs(10);
        let g = l.lock("k").lease(lease).try_acquire().await?.ok_or("a free key was held")?;
        assert_eq!(counting.attempts(), 1);
        // A second acquisition finds the key held: one more attempt, no grant.
        assert!(l.lock("k").lease(lease).try_acquire().await?.is_none());
        assert_eq!(counting.attempts(), 2);
        g.release().await?;
        assert_eq!(counting.renewals(), (0, 0));
        Ok(())
    }
}
