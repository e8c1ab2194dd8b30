//! The keeper: one task per client that keeps holds whose lease is longer than the bucket's
//! TTL, and gives them up before the server can free them.
//!
//! A 2.9 server has one TTL per bucket (its max age), while each hold asks for its own lease.
//! A hold whose lease ends before its key would expire needs nothing (the server keeps it a
//! little longer than asked, which only a crashed holder's waiters notice). A longer one is
//! rewritten by this task every third of the TTL, as a session's keep-alive would be; and when
//! its rewrites go unconfirmed so long that the server may already have freed the key (the
//! last confirmed send plus the TTL, less the drift margin), its guards are told it is lost,
//! before anyone else can be granted it. A crashed holder therefore blocks its keys for at
//! most the TTL, whatever lease it asked for.

use std::sync::{Arc, Weak};
use std::time::Duration;

use futures_util::future::join_all;
use lock_core::{DRIFT_MARGIN_FLOOR, DRIFT_MARGIN_RATE, LostReason, drift_margin};
use tokio::time::Instant;

use crate::backend::Inner;
use crate::keys::lock_key;

/// Start the keeper of `inner`; it ends when the client is dropped.
pub(crate) fn start(inner: &Arc<Inner>) {
    let ttl = inner.bucket.ttl;
    let weak = Arc::downgrade(inner);
    inner.runtime.spawn(run(weak, ttl));
}

async fn run(weak: Weak<Inner>, ttl: Duration) {
    // Several looks per renewal period, so that a give-up is never late by much.
    let tick = (ttl / 8).max(Duration::from_millis(5));
    let margin = drift_margin(ttl, DRIFT_MARGIN_RATE, DRIFT_MARGIN_FLOOR);
    let mut interval = tokio::time::interval(tick);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        interval.tick().await;
        let Some(inner) = weak.upgrade() else { return };
        let now = Instant::now();
        let mut due = Vec::new();
        for (key, hold) in inner.holds.all() {
            let t = hold.timing();
            let server_end = t.confirmed + ttl;
            if hold.is_lost() || t.deadline <= server_end {
                continue;
            }
            if now + Duration::from_millis(1) >= server_end.checked_sub(margin).unwrap_or(server_end) {
                // The server may free it before the next confirmation could arrive.
                hold.mark_lost(LostReason::DeadlinePassed);
                continue;
            }
            if now >= t.confirmed + ttl / 3 {
                due.push((key, hold));
            }
        }
        if due.is_empty() {
            continue;
        }
        let writes = due.iter().map(|(key, hold)| {
            let inner = &inner;
            async move {
                match inner.rewrite(&lock_key(key), hold, None, None).await {
                    Ok(true) => hold.mark_held(),
                    Ok(false) => hold.mark_lost(LostReason::NotOwner),
                    Err(e) => {
                        tracing::debug!(error = %e, "nats lock keep-alive failed");
                        hold.mark_uncertain();
                    }
                }
            }
        });
        // Bounded by one tick, so the give-up checks run on time while the server is slow; a
        // write cut off here that landed is found by the next one (`rewrite` adopts it).
        let _ = tokio::time::timeout(tick, join_all(writes)).await;
        drop(inner);
    }
}
