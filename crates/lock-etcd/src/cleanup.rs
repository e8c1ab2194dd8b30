//! Deleting our own lock keys: the cancel guard of an attempt, the background delete of a
//! released or lost hold's key, and the revoke of a lease given up.
//!
//! A key is named exactly (`<prefix>/<key>/<lease>_<n>`, unique per attempt) and deleted only
//! while its create revision is the one we were granted, so a late cleanup can only remove its
//! own attempt's key, never a later grant.

use std::time::Duration;

use etcd_client::{Client, Compare, CompareOp, Txn, TxnOp};
use lock_core::backend::{Backoff, Cleanup};
use tokio::runtime::Handle;
use tokio::time::Instant;

use crate::error::{lease_gone, lock_error};

/// First and longest pause between retries of a delete that failed on a connection error. The
/// key blocks the lock's queue until it goes or its lease ends, so the delete is retried (the
/// core retries acquisitions, not cleanups), without hammering a server that is coming back.
const RETRY_MIN: Duration = Duration::from_millis(20);
const RETRY_MAX: Duration = Duration::from_secs(1);
/// How long a background delete keeps trying: past this the lease (revoked or expiring with
/// the client) is the backstop.
const RETRY_FOR: Duration = Duration::from_secs(30);

/// The cancel guard of an acquisition attempt: armed before the put is sent, so a dropped
/// (cancelled) attempt, a `Held` answer or an error never leaves a key in the queue. The
/// attempt's key is unique, so deleting it by name alone is exact.
pub(crate) fn guard(client: &Client, name: String) -> Cleanup {
    let client = client.clone();
    Cleanup::arm("etcd lock attempt", move || async move {
        let mut kv = client.kv_client();
        let mut backoff = Backoff::new(RETRY_MIN, RETRY_MAX);
        let started = Instant::now();
        loop {
            match kv.delete(name.as_bytes(), None).await {
                Ok(_) => return Ok(()),
                Err(e) if started.elapsed() > RETRY_FOR => return Err(lock_error(e)),
                Err(e) => {
                    tracing::debug!(error = %e, "lock attempt key delete failed; retrying");
                    tokio::time::sleep(backoff.next_delay()).await;
                }
            }
        }
    })
}

/// The delete of `name` if its create revision is still `fence`: `Ok(true)` when it was ours
/// and is gone now, `Ok(false)` when it was not there (or was another grant).
pub(crate) async fn delete_if_ours(client: &Client, name: &str, fence: i64) -> Result<bool, etcd_client::Error> {
    let txn = Txn::new()
        .when([Compare::create_revision(name, CompareOp::Equal, fence)])
        .and_then([TxnOp::delete(name, None)]);
    Ok(client.kv_client().txn(txn).await?.succeeded())
}

/// Delete `name` (while its create revision is `fence`) in the background until it is gone.
pub(crate) fn spawn_delete(runtime: &Handle, client: Client, name: String, fence: i64) {
    runtime.spawn(async move {
        let mut backoff = Backoff::new(RETRY_MIN, RETRY_MAX);
        let started = Instant::now();
        while let Err(e) = delete_if_ours(&client, &name, fence).await {
            if started.elapsed() > RETRY_FOR {
                tracing::warn!(error = %e, "lock key delete failed; its lease will free it");
                return;
            }
            tokio::time::sleep(backoff.next_delay()).await;
        }
    });
}

/// Revoke `lease` in the background (every key under it goes with it) until that succeeds, the
/// lease is already gone, or it must have expired on its own (no keep-alive is sent any more).
pub(crate) fn spawn_revoke(runtime: &Handle, client: Client, lease: i64, ttl: Duration) {
    runtime.spawn(async move {
        let mut leases = client.lease_client();
        let mut backoff = Backoff::new(RETRY_MIN, RETRY_MAX);
        let started = Instant::now();
        loop {
            match leases.revoke(lease).await {
                Ok(_) => return,
                Err(e) if lease_gone(&e) => return,
                Err(_) if started.elapsed() > ttl.saturating_mul(2) => return,
                Err(e) => {
                    tracing::debug!(error = %e, "lease revoke failed; retrying");
                    tokio::time::sleep(backoff.next_delay()).await;
                }
            }
        }
    });
}
