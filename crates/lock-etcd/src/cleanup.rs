//! Deleting our own lock keys: the cancel guard of an attempt, the background delete of a
//! released or lost hold's key, and the revoke of a lease given up.
//!
//! A key is named exactly (`<prefix>/<key>/<lease>_<n>`, unique per attempt) and deleted only
//! while its create revision is the one we were granted, so a late cleanup can only remove its
//! own attempt's key, never a later grant.

use std::future::Future;
use std::time::Duration;

use etcd_client::{Client, Compare, CompareOp, PutOptions, Txn, TxnOp};
use lock_core::backend::{Backoff, Cleanup};
use tokio::runtime::Handle;
use tokio::time::Instant;

use crate::error::{bounded, lease_gone, lock_error};

/// First and longest pause between retries of a delete that failed on a connection error. The
/// key blocks the lock's queue until it goes or its lease ends, so the delete is retried (the
/// core retries acquisitions, not cleanups), without hammering a server that is coming back.
const RETRY_MIN: Duration = Duration::from_millis(20);
const RETRY_MAX: Duration = Duration::from_secs(1);
/// How long a background delete keeps trying: past this the lease (revoked or expiring with
/// the client) is the backstop.
const RETRY_FOR: Duration = Duration::from_secs(30);

/// The keys of one acquisition attempt.
#[derive(Clone)]
pub(crate) struct AttemptKeys {
    /// Its place in the lock's queue: `<prefix>/<key>/<lease>_<n>`.
    pub name: String,
    /// `<prefix>/%cancelled/<lease>_<n>`: while it exists, the attempt's put cannot apply (its
    /// transaction compares it). No encoded key is `%cancelled` (encoded keys carry `%` only as
    /// `%25` or `%2F`), so it is never in a lock's queue.
    pub marker: String,
    pub lease: i64,
}

/// Repeat `op` until it succeeds or [`RETRY_FOR`] has passed.
async fn retry<F, Fut>(what: &'static str, mut op: F) -> lock_core::Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), etcd_client::Error>>,
{
    let mut backoff = Backoff::new(RETRY_MIN, RETRY_MAX);
    let started = Instant::now();
    loop {
        match op().await {
            Ok(()) => return Ok(()),
            Err(e) if started.elapsed() > RETRY_FOR => return Err(lock_error(e)),
            Err(e) => {
                tracing::debug!(error = %e, what, "etcd cleanup failed; retrying");
                tokio::time::sleep(backoff.next_delay()).await;
            }
        }
    }
}

/// The cancel guard of an attempt whose put may be on its way: armed before the put is sent,
/// so a dropped (cancelled) attempt never leaves a key in the queue. etcd applies concurrent
/// requests in no fixed order, so a plain delete could overtake the put; instead one
/// transaction deletes the key and creates the attempt's marker, which makes a put arriving
/// later fail its comparison. The marker lives under the lease and is deleted once the put
/// can no longer arrive (twice the request timeout).
pub(crate) fn guard(client: &Client, keys: AttemptKeys, timeout: Duration) -> Cleanup {
    let client = client.clone();
    Cleanup::arm("etcd lock attempt", move || async move {
        let mut kv = client.kv_client();
        let fence = Txn::new().and_then([
            TxnOp::put(keys.marker.as_str(), "", Some(PutOptions::new().with_lease(keys.lease))),
            TxnOp::delete(keys.name.as_str(), None),
        ]);
        retry("fence off a cancelled attempt", || {
            let (mut kv, fence) = (kv.clone(), fence.clone());
            async move {
                match bounded(timeout, kv.txn(fence)).await {
                    // No lease, no put: the attempt's own put fails the same way.
                    Err(e) if lease_gone(&e) => Ok(()),
                    r => r.map(drop),
                }
            }
        })
        .await?;
        tokio::time::sleep(timeout.saturating_mul(2)).await;
        let _ = bounded(timeout, kv.delete(keys.marker.as_str(), None)).await;
        Ok(())
    })
}

/// The attempt's put was answered: from now on `cleanup` deletes the key with one plain
/// delete (nothing of this attempt is still on its way).
pub(crate) fn answered(cleanup: &mut Cleanup, client: &Client, name: String, timeout: Duration) {
    let client = client.clone();
    let plain = Cleanup::arm("etcd lock attempt", move || async move {
        let kv = client.kv_client();
        retry("delete an attempt's key", || {
            let mut kv = kv.clone();
            let name = name.clone();
            async move { bounded(timeout, kv.delete(name, None)).await.map(drop) }
        })
        .await
    });
    std::mem::replace(cleanup, plain).disarm();
}

/// The delete of `name` if its create revision is still `fence`: `Ok(true)` when it was ours
/// and is gone now, `Ok(false)` when it was not there (or was another grant).
pub(crate) async fn delete_if_ours(
    client: &Client,
    name: &str,
    fence: i64,
    timeout: Duration,
) -> Result<bool, etcd_client::Error> {
    let txn = Txn::new()
        .when([Compare::create_revision(name, CompareOp::Equal, fence)])
        .and_then([TxnOp::delete(name, None)]);
    Ok(bounded(timeout, client.kv_client().txn(txn)).await?.succeeded())
}

/// Delete `name` (while its create revision is `fence`) in the background until it is gone.
pub(crate) fn spawn_delete(runtime: &Handle, client: Client, name: String, fence: i64, timeout: Duration) {
    runtime.spawn(async move {
        let delete = || async { delete_if_ours(&client, &name, fence, timeout).await.map(drop) };
        let done = retry("delete a lock key", delete).await;
        if let Err(e) = done {
            tracing::warn!(error = %e, "lock key delete failed; its lease will free it");
        }
    });
}

/// Revoke `lease` in the background (every key under it goes with it) until that succeeds, the
/// lease is already gone, or it must have expired on its own (no keep-alive is sent any more).
pub(crate) fn spawn_revoke(runtime: &Handle, client: Client, lease: i64, ttl: Duration, timeout: Duration) {
    runtime.spawn(async move {
        let mut leases = client.lease_client();
        let mut backoff = Backoff::new(RETRY_MIN, RETRY_MAX);
        let started = Instant::now();
        loop {
            match bounded(timeout, leases.revoke(lease)).await {
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
