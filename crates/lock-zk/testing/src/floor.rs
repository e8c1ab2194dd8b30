//! The raw ZooKeeper floor: the bare recipe steps.

use lock_testkit::side::{DriverError, RawFloor, time};

pub(crate) async fn zk(url: &str, n: usize) -> Result<RawFloor, DriverError> {
    use lock_zk::zookeeper_client as zkc;
    let hosts = url.split_once("://").map_or(url, |(_, r)| r);
    let hosts = hosts.split_once('/').map_or(hosts, |(h, _)| h);
    let client = zkc::Client::connector().connect(hosts).await?;
    let opts = zkc::CreateMode::EphemeralSequential.with_acls(zkc::Acls::anyone_all());
    // A fresh ZooKeeper is a cold JVM whose first thousands of requests are slower (figures in
    // docs/BENCH.md, from examples/zk_profile.rs), and the zk target is the first on its server
    // while Curator comes after it. Untimed requests first, so that both are timed on a warm
    // server.
    for _ in 0..2 * n {
        client.check_stat("/").await?;
        let (_, seq) = client.create("/dlock-floor-", b"", &opts).await?;
        client.delete(&format!("/dlock-floor-{seq}"), None).await?;
    }
    let rtt = time(n, |_| {
        let c = client.clone();
        async move { c.check_stat("/").await.map(drop) }
    })
    .await?;
    let pair = time(n, |_| {
        let c = client.clone();
        let opts = &opts;
        async move {
            let (_, seq) = c.create("/dlock-floor-", b"", opts).await?;
            c.delete(&format!("/dlock-floor-{seq}"), None).await
        }
    })
    .await?;
    Ok(RawFloor::new("exists", "create ephemeral-sequential + delete", rtt, pair))
}
