//! The keeper: one task per client that keeps holds whose lease is longer than the bucket's
//! TTL, and gives them up before the server can free them.
//!
//! A 2.9 server has one TTL per bucket (its max age), while each hold asks for its own lease.
//! A hold whose lease ends before its key would expire needs nothing (the server keeps it a
//! little longer than asked, which only a crashed holder's waiters notice). A longer one is
//! rewritten by this task every third of the TTL, as a session's keep-alive would be; and when
//! its rewrites go unconfirmed so long that the server may already have freed the key (the
//! last confirmed send plus the TTL, less the drift margin), its guards read it lost by
//! themselves (`Hold::confirm` tells them that instant), before anyone else can be granted it,
//! and this task tells those that wait on the lost signal. A crashed holder therefore blocks its keys for at
//! most the TTL, whatever lease it asked for.

use std::sync::{Arc, Weak};
use std::time::Duration;

use lock_core::LostReason;
use tokio::time::Instant;

use crate::client::Inner;
use crate::holds::kept_for;
use crate::keys::lock_key;

/// Start the keeper of `inner`; it ends when the client is dropped.
pub(crate) fn start(inner: &Arc<Inner>) {
    let ttl = inner.bucket.ttl;
    let weak = Arc::downgrade(inner);
    inner.runtime.spawn(run(weak, ttl));
}

async fn run(weak: Weak<Inner>, ttl: Duration) {
    let tick = (ttl / 8).max(Duration::from_millis(5));
    let kept = kept_for(ttl);
    let mut wake = Instant::now() + tick;
    loop {
        tokio::time::sleep_until(wake).await;
        let Some(inner) = weak.upgrade() else { return };
        let now = Instant::now();
        wake = now + tick;
        inner.holds.drop_lost();
        for (key, hold) in inner.holds.all() {
            let t = hold.timing();
            let server_end = t.confirmed + ttl;
            if hold.is_lost() || t.deadline <= server_end {
                continue;
            }
            // The server may free it from `server_end` on: its guards read it lost from
            // `give_up` by themselves (`Hold::confirm`), and this task wakes then to tell
            // those that wait on the lost signal rather than read it.
            let give_up = t.confirmed + kept;
            if now >= give_up {
                hold.mark_lost(LostReason::DeadlinePassed);
                continue;
            }
            wake = wake.min(give_up);
            if now >= t.confirmed + ttl / 3 && hold.start_keeping() {
                // In a task of its own: a slow write must not delay the give-ups.
                let weak = weak.clone();
                inner.runtime.spawn(async move {
                    let Some(inner) = weak.upgrade() else { return };
                    let name = lock_key(&key);
                    let write = inner.rewrite(&name, &hold, None, None);
                    match tokio::time::timeout(ttl, write).await {
                        Ok(Ok(true)) => hold.mark_held(),
                        Ok(Ok(false)) => hold.mark_lost(LostReason::NotOwner),
                        // A write cut off here that landed is found by the next one (`rewrite`
                        // adopts it).
                        Ok(Err(_)) | Err(_) => hold.mark_uncertain(),
                    }
                    hold.stop_keeping();
                });
            }
        }
    }
}
