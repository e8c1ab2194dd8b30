//! Deleting our own lock keys: the cancel guard of an attempt, the background delete of a
//! released or lost hold's key, and the revoke of a lease given up.
//!
//! A key is named exactly (`<prefix>/<key>/<lease>_<n>`, unique per attempt) and deleted only
//! while its create revision is the one we were granted, so a late cleanup can only remove its
//! own attempt's key, never a later grant.
//!
//! A key of ours blocks its lock's queue for as long as it and its lease live, so every delete
//! is retried for exactly that long: until it succeeds, or the lease it lives under ended (the
//! key went with it) or its client is gone (the lease is revoked, or expires unrenewed). No
//! fixed give-up: a delete abandoned while the lease is still kept alive would block the lock
//! until the process exits.

use std::future::Future;
use std::time::Duration;

use etcd_client::{Client, Compare, CompareOp, PutOptions, Txn, TxnOp};
use lock_core::backend::{Cleanup, retry_cleanup, spawn_cleanup};
use tokio::runtime::Handle;
use tokio::sync::watch;

use crate::error::{bounded, lease_gone};

/// The life of one lease as its keys' cleanups see it: over once the lease ended, or once its
/// session is dropped with the client. Or of several leases ([`Life::and`]): over once all are.
#[derive(Clone)]
pub(crate) struct Life(Vec<watch::Receiver<bool>>);

impl Life {
    pub fn new(over: watch::Receiver<bool>) -> Life {
        Life(vec![over])
    }

    /// Over once both `self` and `other` are: for a key that may be on either lease.
    pub fn and(mut self, other: Life) -> Life {
        self.0.extend(other.0);
        self
    }

    /// Returns once the life of every lease is over.
    pub async fn over(&self) {
        for over in &self.0 {
            // An error: the session is gone, which is an end too.
            let _ = over.clone().wait_for(|ended| *ended).await;
        }
    }

    /// `op` until it succeeds, or until the lease's life is over: then the key went (or goes)
    /// with the lease, and waiting for `op` would only keep a task and a connection alive.
    async fn retry<F, Fut>(&self, what: &'static str, op: F)
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<(), etcd_client::Error>>,
    {
        let failing = |e: &etcd_client::Error| {
            tracing::debug!(error = %e, what, "etcd cleanup failed; retrying while the lease lives");
            true
        };
        let _ = retry_cleanup(op, failing, self.over()).await;
    }

    /// Sleep for `d`, or less if the lease's life ends first.
    async fn sleep(&self, d: Duration) {
        tokio::select! {
            () = tokio::time::sleep(d) => {}
            () = self.over() => {}
        }
    }
}

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
    /// For an attempt that may queue on the waiting lease: that lease, and a second marker
    /// under it (`<marker>w`, never another attempt's: `n` is hex), which the put compares too.
    /// One marker under one lease would not do: the put may land under either lease, and a
    /// marker that went with one lease would let a late put land under the other.
    pub waiting: Option<(i64, String)>,
}

impl AttemptKeys {
    /// Every cancel marker of the attempt with the lease it goes under.
    pub fn markers(&self) -> Vec<(&str, i64)> {
        let waiting = self.waiting.as_ref().map(|(lease, marker)| (marker.as_str(), *lease));
        std::iter::once((self.marker.as_str(), self.lease)).chain(waiting).collect()
    }
}

/// The cancel guard of an attempt whose put may be on its way: armed before the put is sent,
/// so a dropped (cancelled) attempt never leaves a key in the queue. etcd applies concurrent
/// requests in no fixed order, so a plain delete could overtake the put; instead one
/// transaction deletes the key and creates the attempt's marker, which makes a put arriving
/// later fail its comparison. The marker lives under the lease and is deleted once the put
/// can no longer arrive (twice the request timeout).
///
/// An attempt that may queue on the waiting lease has a marker under each lease. When a lease
/// is gone (a put of a marker under it is refused), no put under it can land either: the fence
/// is sent again with the markers of the leases that remain, and with none left there is
/// nothing to fence off. `life` is that of every lease the put may land under.
pub(crate) fn guard(client: &Client, keys: AttemptKeys, timeout: Duration, life: Life) -> Cleanup {
    let client = client.clone();
    Cleanup::arm("etcd lock attempt", move || async move {
        let kv = client.kv_client();
        let fence = |markers: &[(&str, i64)]| {
            let puts = markers
                .iter()
                .map(|(m, lease)| TxnOp::put(*m, "", Some(PutOptions::new().with_lease(*lease))));
            Txn::new().and_then(puts.chain([TxnOp::delete(keys.name.as_str(), None)]).collect::<Vec<_>>())
        };
        let all = keys.markers();
        // Every marker; if a lease is gone (the error does not say which), each marker alone.
        let tries: Vec<Txn> = if all.len() > 1 {
            std::iter::once(fence(&all)).chain(all.iter().map(|m| fence(std::slice::from_ref(m)))).collect()
        } else {
            vec![fence(&all)]
        };
        life.retry("fence off a cancelled attempt", || {
            let (kv, tries) = (kv.clone(), tries.clone());
            async move {
                for txn in tries {
                    match bounded(timeout, kv.clone().txn(txn)).await {
                        // No lease, no put under it: try the markers of the others.
                        Err(e) if lease_gone(&e) => continue,
                        r => return r.map(drop),
                    }
                }
                Ok(())
            }
        })
        .await;
        life.sleep(timeout.saturating_mul(2)).await;
        life.retry("delete a cancel marker", || {
            let mut kv = kv.clone();
            let deletes: Vec<TxnOp> = keys.markers().iter().map(|(m, _)| TxnOp::delete(*m, None)).collect();
            async move { bounded(timeout, kv.txn(Txn::new().and_then(deletes))).await.map(drop) }
        })
        .await;
        Ok(())
    })
}

/// The attempt's put was answered: from now on `cleanup` deletes the key with one plain
/// delete (nothing of this attempt is still on its way).
pub(crate) fn answered(cleanup: &mut Cleanup, client: &Client, name: String, timeout: Duration, life: Life) {
    let client = client.clone();
    let plain = Cleanup::arm("etcd lock attempt", move || async move {
        let kv = client.kv_client();
        life.retry("delete an attempt's key", || {
            let mut kv = kv.clone();
            let name = name.clone();
            async move { bounded(timeout, kv.delete(name, None)).await.map(drop) }
        })
        .await;
        Ok(())
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

/// Delete `name` (while its create revision is `fence`) until it is gone or its lease's
/// `life` is over.
async fn delete_until_gone(client: Client, name: String, fence: i64, timeout: Duration, life: Life) {
    let delete = || async { delete_if_ours(&client, &name, fence, timeout).await.map(drop) };
    life.retry("delete a lock key", delete).await;
}

/// [`delete_until_gone`] in the background.
pub(crate) fn spawn_delete(
    runtime: &Handle,
    client: Client,
    name: String,
    fence: i64,
    timeout: Duration,
    life: Life,
) {
    spawn_cleanup(runtime, delete_until_gone(client, name, fence, timeout, life));
}

/// Armed while a release's delete of `name` is on its way: the hold is out of the table by
/// then, so a release cancelled there (or failed) leaves the delete to this guard's drop.
pub(crate) fn releasing(client: &Client, name: &str, fence: i64, timeout: Duration, life: Life) -> Cleanup {
    let (client, name) = (client.clone(), name.to_owned());
    Cleanup::arm("etcd lock release", move || async move {
        delete_until_gone(client, name, fence, timeout, life).await;
        Ok(())
    })
}

/// Revoke `lease` in the background (every key under it goes with it) until that succeeds, the
/// lease is already gone, or it must have expired on its own (no keep-alive is sent any more).
pub(crate) fn spawn_revoke(runtime: &Handle, client: Client, lease: i64, ttl: Duration, timeout: Duration) {
    spawn_cleanup(runtime, async move {
        let leases = client.lease_client();
        let revoke = || {
            let mut leases = leases.clone();
            async move {
                match bounded(timeout, leases.revoke(lease)).await {
                    Err(e) if lease_gone(&e) => Ok(()),
                    r => r.map(drop),
                }
            }
        };
        let failing = |e: &etcd_client::Error| {
            tracing::debug!(error = %e, "lease revoke failed; retrying");
            true
        };
        let _ = retry_cleanup(revoke, failing, tokio::time::sleep(ttl.saturating_mul(2))).await;
    });
}
