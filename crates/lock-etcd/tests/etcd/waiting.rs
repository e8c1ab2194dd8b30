//! Waiters' keys on the client's short waiting lease (`src/session/waiting.rs`): a waiter that
//! dies without clean-up costs the next one at most that lease's TTL (about 2 s), not the
//! session lease's; a waiter moves to the session lease when it is granted, keeping its create
//! revision (its place and fence); and a free lock still costs one transaction.

use std::time::Duration;

use lock_core::FencingToken;
use lock_etcd::EtcdLock;
use lock_etcd::etcd_client::{self as etcd, GetOptions, KeyValue, SortOrder, SortTarget};
use lock_testkit::{eventually, key, server, within};
use tokio::time::Instant;

use crate::common;

use common::{locker, metric, queued};
use lock_core::backend::Notes;

/// The session lease of these clients: the default, five times the waiting lease's TTL.
const SESSION_TTL: Duration = lock_etcd::DEFAULT_LEASE_TTL;
/// How long any answer may take on a loaded 2-core machine.
const ANSWER: Duration = Duration::from_secs(10);

async fn etcd_lock(endpoint: &str) -> EtcdLock {
    common::etcd_lock([endpoint.to_owned()], "/waiting", SESSION_TTL, Duration::from_secs(2)).await
}

/// Every key under `prefix`, first created first.
async fn queue(client: &etcd::Client, prefix: &str) -> Vec<KeyValue> {
    let opts = GetOptions::new().with_prefix().with_sort(SortTarget::Create, SortOrder::Ascend);
    client.clone().get(prefix, Some(opts)).await.expect("get").kvs().to_vec()
}

/// Wait until `n` keys are queued under `prefix`.
async fn until_queued(client: &etcd::Client, prefix: &str, n: usize) {
    let what = format!("{n} keys queued");
    eventually(ANSWER, &what, || async { queued(client, prefix).await == n }).await;
}

/// While it waits, a waiter's key is on a lease of the short TTL, not on its session lease;
/// once granted, the same key (same create revision, which is its fence) is on the session
/// lease, and its promotion's put reads as no note.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_queues_on_the_short_lease_and_holds_on_the_session_lease() {
    let Some(srv) = server::or_skip("etcd", lock_etcd_testing::try_shared_etcd()) else { return };
    let (holder, waiter) = (etcd_lock(&srv.endpoint()).await, etcd_lock(&srv.endpoint()).await);
    let k = key("short-lease");
    let (prefix, mut observer) = (holder.lock_prefix(&k), holder.client());
    let g = locker(&holder).try_lock(&k).await.expect("try").expect("free");
    let (l, k2) = (locker(&waiter), k.clone());
    let waiting = tokio::spawn(async move { l.lock(&k2).wait(ANSWER).acquire().await });
    until_queued(&observer, &prefix, 2).await;

    let keys = queue(&observer, &prefix).await;
    assert_eq!(keys[0].lease(), holder.lease_id(), "a grant on a free lock is on the session lease");
    let queued_key = keys[1].clone();
    assert_ne!(queued_key.lease(), waiter.lease_id(), "the waiter's key is on its session lease");
    let ttl = observer.lease_time_to_live(queued_key.lease(), None).await.expect("lease ttl");
    assert!(
        (1..=2).contains(&ttl.granted_ttl()),
        "the waiter's key is on a lease of {} s",
        ttl.granted_ttl()
    );

    g.release().await.expect("release");
    let got = within(ANSWER, "the waiter is granted", waiting).await.expect("task").expect("acquire");
    let keys = queue(&observer, &prefix).await;
    assert_eq!(keys.len(), 1, "only the new holder's key");
    assert_eq!(keys[0].key(), queued_key.key(), "the same key");
    assert_eq!(keys[0].lease(), waiter.lease_id(), "held on the session lease");
    assert_eq!(keys[0].create_revision(), queued_key.create_revision(), "the same create revision");
    let fence = u64::try_from(keys[0].create_revision()).ok().map(FencingToken);
    assert_eq!(got.fence(), fence, "the fence is the key's create revision");
    assert_eq!(holder.note(&k).await.expect("note"), None, "the promotion set no note");
    got.release().await.expect("release");
}

/// A waiter cut off from the server (as good as killed: nothing of it reaches the server, no
/// clean-up, no keep-alive) delays the waiter behind it by about the waiting lease's TTL, not
/// by its session lease's (10 s): its key goes with the waiting lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_cut_off_costs_the_next_at_most_the_short_lease() {
    let Some(srv) = server::or_skip("etcd", lock_etcd_testing::try_shared_etcd()) else { return };
    let endpoint = srv.endpoint();
    let proxy = lock_testkit::proxy::Proxy::start(endpoint.parse().expect("addr")).await.expect("proxy");
    let holder = etcd_lock(&endpoint).await;
    let cut = etcd_lock(&proxy.addr().to_string()).await;
    let next = etcd_lock(&endpoint).await;
    let k = key("cut-waiter");
    let (prefix, observer) = (holder.lock_prefix(&k), holder.client());
    let wait = |e: &EtcdLock| {
        let (l, k) = (locker(e), k.clone());
        tokio::spawn(async move { l.lock(&k).wait(Duration::from_secs(30)).acquire().await })
    };
    let g = locker(&holder).try_lock(&k).await.expect("try").expect("free");
    let lost = wait(&cut);
    until_queued(&observer, &prefix, 2).await;
    let granted = wait(&next);
    until_queued(&observer, &prefix, 3).await;

    proxy.blackhole(true);
    let released = Instant::now();
    g.release().await.expect("release");
    let got = within(Duration::from_secs(30), "the next waiter is granted", granted).await.expect("task");
    let took = released.elapsed();
    got.expect("acquire").release().await.expect("release");
    lost.abort();
    proxy.blackhole(false);
    // The waiting lease's TTL (2 s), etcd's lease expiry check (every 0.5 s), and slack.
    assert!(took < Duration::from_secs(5), "the next waiter waited {took:?} for a cut-off one");
}

/// A free lock taken with a wait is one transaction (the waiting lease's choice is inside it,
/// nested) and no lease grant. A server of its own, whose metrics count the requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_free_lock_taken_with_a_wait_is_one_transaction() {
    let Some(srv) = server::or_skip("etcd", lock_etcd_testing::EtcdServer::start()) else { return };
    let endpoint = srv.endpoint();
    // A long session lease: no keep-alive (and its check of the holds, a transaction) while
    // counting.
    let lock = common::etcd_lock([endpoint.clone()], "/one-txn", Duration::from_secs(60), ANSWER).await;
    let k = key("one-txn");
    let started = |method: &str| format!(r#"grpc_server_started_total{{grpc_method="{method}""#);
    let (txns, grants) = (started("Txn"), started("LeaseGrant"));
    let before = (metric(&endpoint, &txns).await, metric(&endpoint, &grants).await);
    let g = locker(&lock).lock(&k).wait(ANSWER).acquire().await.expect("acquire");
    let after = (metric(&endpoint, &txns).await, metric(&endpoint, &grants).await);
    g.release().await.expect("release");
    assert_eq!(after.0 - before.0, 1.0, "transactions for a free lock");
    assert_eq!(after.1 - before.1, 0.0, "lease grants for a free lock");
}
