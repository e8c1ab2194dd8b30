//! How a client's waiters watch a lock: one watch of the lock's prefix per client, kept open
//! across waits (`src/notify.rs`), and a waiter that knows every key ahead of its own takes the
//! lock from the deletes it sees, without a read.

use std::time::Duration;

use lock_testkit::{eventually, key, server, within};

use crate::common;

use common::{TTL, locker, metric, queued};

/// A client waiting on one lock again and again keeps one watch of the lock's prefix open. etcd
/// serves a watch that was registered while another write landed from a loop that runs every
/// 100 ms, so a watch opened per wait woke its waiter up to 100 ms late under contention (8
/// clients: p99 100 ms against a p50 of 13); a watch kept open is caught up once. A server of
/// its own, whose metrics count the watch streams opened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeated_waits_share_one_prefix_watch() {
    let Some(srv) = server::or_skip("etcd", lock_etcd_testing::EtcdServer::start()) else { return };
    let endpoint = srv.endpoint();
    let timeout = Duration::from_secs(2);
    let holder = common::etcd_lock([endpoint.clone()], "/watch", TTL, timeout).await;
    let waiter = common::etcd_lock([endpoint.clone()], "/watch", TTL, timeout).await;
    let k = key("one-watch");
    let (prefix, observer) = (holder.lock_prefix(&k), holder.client());
    let streams = r#"grpc_server_started_total{grpc_method="Watch""#;
    let before = metric(&endpoint, streams).await;
    const WAITS: usize = 5;
    for round in 0..WAITS {
        let g = locker(&holder).try_lock(&k).await.expect("try").expect("free");
        let (l, k2) = (locker(&waiter), k.clone());
        let waiting = tokio::spawn(async move { l.lock(&k2).wait(Duration::from_secs(10)).acquire().await });
        eventually(Duration::from_secs(5), "the waiter queued", || async {
            queued(&observer, &prefix).await == 2
        })
        .await;
        g.release().await.expect("release");
        let w = within(Duration::from_secs(5), "the waiter acquires", waiting).await.expect("task");
        w.unwrap_or_else(|e| panic!("round {round}: {e}")).release().await.expect("release");
    }
    let opened = metric(&endpoint, streams).await - before;
    assert_eq!(opened, 1.0, "watch streams opened for {WAITS} waits of one client on one lock");
}

/// A waiter queued behind another waiter (not right behind the holder) whose put read every
/// key ahead of it, on a client that already watches the lock, takes the lock when the last of
/// them is deleted, with no read of its predecessor: under contention that read was on every
/// hand-over's path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_knew_every_key_ahead_takes_the_lock_without_a_read() {
    let Some(srv) = server::or_skip("etcd", lock_etcd_testing::try_shared_etcd()) else { return };
    let endpoints = [srv.endpoint()];
    let timeout = Duration::from_secs(2);
    let holder = common::etcd_lock(endpoints.clone(), "/ahead", TTL, timeout).await;
    let first = common::etcd_lock(endpoints.clone(), "/ahead", TTL, timeout).await;
    let second = common::etcd_lock(endpoints, "/ahead", TTL, timeout).await;
    let k = key("keys-ahead");
    let (prefix, observer) = (holder.lock_prefix(&k), holder.client());
    let wait = |l: &lock_etcd::EtcdLock| {
        let (l, k) = (locker(l), k.clone());
        tokio::spawn(async move { l.lock(&k).wait(Duration::from_secs(10)).acquire().await })
    };
    let until_queued = |n: usize| {
        let (observer, prefix) = (observer.clone(), prefix.clone());
        async move {
            let what = format!("{n} keys queued");
            eventually(Duration::from_secs(5), &what, || async { queued(&observer, &prefix).await == n })
                .await
        }
    };
    // `second`'s client opens its watch of the lock's prefix by waiting once.
    let g = locker(&holder).try_lock(&k).await.expect("try").expect("free");
    let w = wait(&second);
    until_queued(2).await;
    g.release().await.expect("release");
    within(Duration::from_secs(5), "the warm-up wait", w)
        .await
        .expect("task")
        .expect("acquire")
        .release()
        .await
        .expect("release");

    let g = locker(&holder).try_lock(&k).await.expect("try").expect("free");
    let w1 = wait(&first);
    until_queued(2).await;
    let w2 = wait(&second);
    until_queued(3).await;
    let reads = second.predecessor_reads();
    g.release().await.expect("release");
    let g1 = within(Duration::from_secs(5), "the first waiter", w1).await.expect("task").expect("acquire");
    g1.release().await.expect("release");
    let g2 = within(Duration::from_secs(5), "the second waiter", w2).await.expect("task").expect("acquire");
    assert_eq!(second.predecessor_reads() - reads, 0, "reads of its predecessor after its put");
    g2.release().await.expect("release");
}
