//! How a client's waiters watch a lock: one watch of the lock's prefix per client, kept open
//! across waits (`src/hub.rs`).

use std::time::Duration;

use lock_testkit::{eventually, key, server, within};

mod common;

use common::{TTL, locker, metric, queued};

/// A client waiting on one lock again and again keeps one watch of the lock's prefix open. etcd
/// serves a watch that was registered while another write landed from a loop that runs every
/// 100 ms, so a watch opened per wait woke its waiter up to 100 ms late under contention (8
/// clients: p99 100 ms against a p50 of 13); a watch kept open is caught up once. A server of
/// its own, whose metrics count the watch streams opened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeated_waits_share_one_prefix_watch() {
    let Some(srv) = server::or_skip("etcd", server::EtcdServer::start()) else { return };
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
