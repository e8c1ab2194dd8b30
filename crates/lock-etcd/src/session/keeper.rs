//! The keep-alive of each lease (its other task, the deadline keeper that gives the lease's
//! holds up when nothing was confirmed in time, is `lock_core::backend::queue::DeadlineKeeper`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use etcd_client::Client;
use lock_core::backend::Backoff;
use lock_core::backend::queue::{Confirmed, QueueHold};
use tokio::time::Instant;

use super::Inner;
use crate::error::lease_gone;

/// Shortest keep-alive period: a tiny TTL must not turn it into a busy loop.
const MIN_PERIOD: Duration = Duration::from_millis(10);

/// What the lease's tasks need: the backend (weakly) and the lease they keep.
pub(crate) struct Watch {
    pub(crate) inner: Weak<Inner>,
    pub(crate) generation: u64,
    pub(crate) lease: i64,
    pub(crate) ttl: Duration,
    pub(crate) client: Client,
    pub(crate) confirmed: Confirmed,
    pub(crate) ended: Arc<AtomicBool>,
}

impl Watch {
    async fn confirmed(&self, sent: Instant) {
        self.confirmed.confirm(sent);
        if let Some(inner) = self.inner.upgrade() {
            inner.holds.each(self.generation, QueueHold::mark_held);
            // Bounded by the keep-alive period, so that the next keep-alive is never late.
            if inner.holds.has(self.generation) {
                let _ = tokio::time::timeout(self.ttl / 3, inner.verify(self.generation)).await;
            }
        }
    }

    fn failed(&self, why: &dyn std::fmt::Display) {
        tracing::debug!(generation = self.generation, error = %why, "etcd lease keep-alive failed; locks uncertain");
        if let Some(inner) = self.inner.upgrade() {
            inner.holds.each(self.generation, QueueHold::mark_uncertain);
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
