//! The two tasks of each lease: the keep-alive, and the deadline keeper that gives the
//! lease's holds up when nothing was confirmed in time.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use etcd_client::Client;
use lock_core::backend::{Backoff, Mutex};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::error::lease_gone;
use crate::session::{Hold, Inner, confirm, give_up_at};

/// Shortest keep-alive period: a tiny TTL must not turn it into a busy loop.
const MIN_PERIOD: Duration = Duration::from_millis(10);

/// What the lease's tasks need: the backend (weakly) and the lease they keep.
pub(crate) struct Watch {
    pub(crate) inner: Weak<Inner>,
    pub(crate) generation: u64,
    pub(crate) lease: i64,
    pub(crate) ttl: Duration,
    pub(crate) client: Client,
    pub(crate) confirmed: Arc<Mutex<Instant>>,
    pub(crate) ended: Arc<AtomicBool>,
    pub(crate) new_hold: Arc<Notify>,
    pub(crate) clock_drift: (f64, Duration),
}

impl Watch {
    async fn confirmed(&self, sent: Instant) {
        confirm(&self.confirmed, sent);
        if let Some(inner) = self.inner.upgrade() {
            inner.for_holds(self.generation, Hold::mark_held);
            // Bounded by the keep-alive period, so that the next keep-alive is never late.
            if inner.has_holds(self.generation) {
                let _ = tokio::time::timeout(self.ttl / 3, inner.verify(self.generation)).await;
            }
        }
    }

    fn failed(&self, why: &dyn std::fmt::Display) {
        tracing::debug!(generation = self.generation, error = %why, "etcd lease keep-alive failed; locks uncertain");
        if let Some(inner) = self.inner.upgrade() {
            inner.for_holds(self.generation, Hold::mark_uncertain);
        }
    }

    fn gone(&self) {
        tracing::warn!(generation = self.generation, "etcd lease revoked or expired; its locks are lost");
        if let Some(inner) = self.inner.upgrade() {
            inner.lease_ended(self.generation);
        }
    }
}

/// Keep the lease alive: one keep-alive every third of the TTL on one stream, each answer
/// awaited at most a sixth of the TTL (so a frozen server shows as uncertain at most half a TTL
/// after the last answer, well before the deadline makes it lost). A failure makes the holds uncertain at once and opens a
/// new stream (whose first answer is unambiguous: a late answer on the old stream could not
/// be told from the answer to a later request). An answer with TTL 0 means the lease is gone.
pub(crate) async fn keep_alive(w: Watch) {
    let period = (w.ttl / 3).max(MIN_PERIOD);
    let answer = (w.ttl / 6).max(MIN_PERIOD);
    let mut lease = w.client.lease_client();
    let mut backoff = Backoff::new(MIN_PERIOD, period);
    loop {
        if w.ended.load(Ordering::Acquire) {
            return;
        }
        let sent = Instant::now();
        let (mut keeper, mut stream) = match tokio::time::timeout(answer, lease.keep_alive(w.lease)).await {
            Ok(Ok(opened)) => opened,
            Ok(Err(e)) if lease_gone(&e) => return w.gone(),
            Ok(Err(e)) => {
                w.failed(&e);
                tokio::time::sleep(backoff.next_delay()).await;
                continue;
            }
            Err(_) => {
                w.failed(&"no answer within a sixth of the ttl");
                continue;
            }
        };
        w.confirmed(sent).await;
        backoff = Backoff::new(MIN_PERIOD, period);
        loop {
            tokio::time::sleep(period).await;
            // Given up (its holds were told lost): keeping it alive would keep its keys, and
            // with them the locks, for as long as this client lives.
            if w.ended.load(Ordering::Acquire) {
                return;
            }
            let sent = Instant::now();
            if let Err(e) = keeper.keep_alive().await {
                w.failed(&e);
                break;
            }
            match tokio::time::timeout(answer, stream.message()).await {
                Ok(Ok(Some(r))) if r.ttl() > 0 => w.confirmed(sent).await,
                Ok(Ok(Some(_))) => return w.gone(),
                Ok(Ok(None)) => {
                    w.failed(&"keep-alive stream closed");
                    break;
                }
                Ok(Err(e)) => {
                    w.failed(&e);
                    break;
                }
                Err(_) => {
                    w.failed(&"no answer within a sixth of the ttl");
                    break;
                }
            }
        }
    }
}

/// When nothing has been confirmed for a TTL less the drift margin (disconnected, server
/// paused, partitioned), give the holds of the lease up: the server may expire it from then on
/// and let another client in. Its own task on its own timer, so that a keep-alive awaiting an
/// answer cannot delay it.
pub(crate) async fn keep_deadline(w: Watch) {
    loop {
        let at = give_up_at(&w.confirmed, w.ttl, w.clock_drift);
        {
            let Some(inner) = w.inner.upgrade() else { return };
            if !inner.has_holds(w.generation) {
                drop(inner);
                // Every new hold wakes it (a stored wake-up if it comes before this wait): a
                // grant made close to the deadline must be given up at the deadline, not at
                // the next periodic look.
                w.new_hold.notified().await;
                continue;
            }
            if Instant::now() >= at {
                tracing::warn!(
                    generation = w.generation,
                    "etcd lease not confirmed within its ttl; locks given up"
                );
                inner.give_up(w.generation);
                return;
            }
        }
        // Confirmations only move the deadline later: recompute it on waking.
        tokio::time::sleep_until(at).await;
    }
}
