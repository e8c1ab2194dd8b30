//! A broadcast counter whose waiters are woken in the order they began to wait.
//!
//! tokio's `watch` spreads its waiters over eight queues, each picked by the runtime's random
//! generator, which only an unstable API seeds: a broadcast woke the same waiters in another
//! order on every run, so which of them reached the store first, and what it found there,
//! changed between two runs of one simulated seed (`lock_testkit::history::sim`: the
//! read-write lock's readers, all woken when a writer leaves). One `Notify` wakes its waiters
//! in the order they registered.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use tokio::sync::Notify;

#[derive(Debug, Default)]
struct Shared {
    value: AtomicU64,
    /// The sender is gone: waiters with nothing new to see are told so.
    closed: AtomicBool,
    notify: Notify,
}

/// The sending side: each [`bump`](Self::bump) wakes every waiter; dropping it ends their
/// waits with "closed".
#[derive(Debug, Default)]
pub(crate) struct Epoch {
    shared: Arc<Shared>,
}

/// A waiter: it sees the bumps made after it subscribed, or after the last one it saw.
#[derive(Debug)]
pub(crate) struct EpochRx {
    shared: Arc<Shared>,
    seen: u64,
}

/// The [`Epoch`] was dropped with no bump left unseen.
#[derive(Debug)]
pub(crate) struct Closed;

impl Epoch {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// One more epoch: every waiter wakes, in the order it began to wait.
    pub(crate) fn bump(&self) {
        self.shared.value.fetch_add(1, Ordering::SeqCst);
        self.shared.notify.notify_waiters();
    }

    /// A waiter for the bumps from now on.
    pub(crate) fn subscribe(&self) -> EpochRx {
        EpochRx { shared: self.shared.clone(), seen: self.shared.value.load(Ordering::SeqCst) }
    }
}

impl Drop for Epoch {
    fn drop(&mut self) {
        self.shared.closed.store(true, Ordering::SeqCst);
        self.shared.notify.notify_waiters();
    }
}

impl EpochRx {
    /// Waits for a bump not seen yet (at once if one came meanwhile), as `watch`'s `changed`.
    /// Cancel-safe: a bump is only marked seen when this returns.
    pub(crate) async fn changed(&mut self) -> Result<(), Closed> {
        loop {
            // Registered before the value is read: a bump after the read wakes it.
            let notified = self.shared.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let now = self.shared.value.load(Ordering::SeqCst);
            if now != self.seen {
                self.seen = now;
                return Ok(());
            }
            if self.shared.closed.load(Ordering::SeqCst) {
                return Err(Closed);
            }
            notified.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    #[tokio::test]
    async fn wakes_in_the_order_of_waiting_and_tells_of_closing() {
        let epoch = Epoch::new();
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for i in 0..20 {
            let (mut rx, order) = (epoch.subscribe(), order.clone());
            tasks.push(tokio::spawn(async move {
                rx.changed().await.expect("bumped");
                order.lock().expect("order").push(i);
                rx.changed().await.is_err()
            }));
            // Each waits before the next is spawned.
            tokio::task::yield_now().await;
        }
        epoch.bump();
        tokio::task::yield_now().await;
        drop(epoch);
        for t in tasks {
            assert!(t.await.expect("waiter"), "closed after the last bump");
        }
        assert_eq!(*order.lock().expect("order"), (0..20).collect::<Vec<_>>());
    }

    #[tokio::test]
    async fn a_bump_before_the_wait_is_seen_once() {
        let epoch = Epoch::new();
        let mut rx = epoch.subscribe();
        epoch.bump();
        epoch.bump();
        rx.changed().await.expect("bumped");
        let again = tokio::time::timeout(std::time::Duration::from_millis(10), rx.changed()).await;
        assert!(again.is_err(), "both bumps seen at once, as watch does");
    }
}
