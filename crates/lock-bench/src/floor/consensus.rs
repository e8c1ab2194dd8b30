//! The raw consensus-store floors: etcd's and ZooKeeper's bare lock steps.

use super::{Floor, floor, time};
use crate::error::{BenchError, Result};

/// The bare etcd v3 lock steps: one transaction that puts a key if absent and reads the
/// queue's head, and one delete (no lease, no keep-alive, no watch).
#[cfg(feature = "etcd")]
pub(super) async fn etcd(url: &str, n: usize) -> Result<Floor> {
    use dlock::lock_etcd::etcd_client::{
        self as etcd, Compare, CompareOp, GetOptions, SortOrder, SortTarget, Txn, TxnOp,
    };
    const WHAT: &str = "etcd floor";
    let hosts = url.split_once("://").map_or(url, |(_, r)| r);
    let hosts = hosts.split(['/', '?']).next().unwrap_or(hosts);
    let endpoints: Vec<String> = hosts.split(',').map(|h| format!("http://{h}")).collect();
    let client = etcd::Client::connect(endpoints, None).await.map_err(BenchError::driver(WHAT))?;
    let rtt = time(WHAT, n, |_| {
        let mut kv = client.kv_client();
        async move { kv.get("/dlock-floor", None).await.map(drop) }
    })
    .await?;
    let pair = time(WHAT, n, |i| {
        let mut kv = client.kv_client();
        async move {
            let key = format!("/dlock-floor/{i:x}");
            let head = GetOptions::new().with_prefix().with_sort(SortTarget::Create, SortOrder::Ascend);
            let txn =
                Txn::new().when([Compare::create_revision(key.as_str(), CompareOp::Equal, 0)]).and_then([
                    TxnOp::put(key.as_str(), "", None),
                    TxnOp::get("/dlock-floor/", Some(head.with_limit(1))),
                ]);
            kv.txn(txn).await?;
            kv.delete(key, None).await.map(drop)
        }
    })
    .await?;
    Ok(floor("get", "txn put-if-absent + head read, delete", rtt, pair))
}

#[cfg(feature = "zk")]
pub(super) async fn zk(url: &str, n: usize) -> Result<Floor> {
    use dlock::lock_zk::zookeeper_client as zkc;
    const WHAT: &str = "zk floor";
    let hosts = url.split_once("://").map_or(url, |(_, r)| r);
    let hosts = hosts.split_once('/').map_or(hosts, |(h, _)| h);
    let client = zkc::Client::connector().connect(hosts).await.map_err(BenchError::driver(WHAT))?;
    let opts = zkc::CreateMode::EphemeralSequential.with_acls(zkc::Acls::anyone_all());
    // A fresh ZooKeeper is a cold JVM whose first thousands of requests are slower (figures in
    // docs/BENCH.md, from examples/zk_profile.rs), and the zk target is the first on its server
    // while Curator comes after it. Untimed requests first, so that both are timed on a warm
    // server.
    for _ in 0..2 * n {
        client.check_stat("/").await.map_err(BenchError::driver(WHAT))?;
        let (_, seq) = client.create("/dlock-floor-", b"", &opts).await.map_err(BenchError::driver(WHAT))?;
        client.delete(&format!("/dlock-floor-{seq}"), None).await.map_err(BenchError::driver(WHAT))?;
    }
    let rtt = time(WHAT, n, |_| {
        let c = client.clone();
        async move { c.check_stat("/").await.map(drop) }
    })
    .await?;
    let pair = time(WHAT, n, |_| {
        let c = client.clone();
        let opts = &opts;
        async move {
            let (_, seq) = c.create("/dlock-floor-", b"", opts).await?;
            c.delete(&format!("/dlock-floor-{seq}"), None).await
        }
    })
    .await?;
    Ok(floor("exists", "create ephemeral-sequential + delete", rtt, pair))
}
