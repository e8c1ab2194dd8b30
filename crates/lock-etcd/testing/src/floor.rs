//! The raw etcd floor: the bare v3 lock steps.

use lock_testkit::side::{DriverError, RawFloor, time};

/// The bare etcd v3 lock steps: one transaction that puts a key if absent and reads the
/// queue's head, and one delete (no lease, no keep-alive, no watch).
pub(crate) async fn etcd(url: &str, n: usize) -> Result<RawFloor, DriverError> {
    use lock_etcd::etcd_client::{
        self as etcd, Compare, CompareOp, GetOptions, SortOrder, SortTarget, Txn, TxnOp,
    };
    let hosts = url.split_once("://").map_or(url, |(_, r)| r);
    let hosts = hosts.split(['/', '?']).next().unwrap_or(hosts);
    let endpoints: Vec<String> = hosts.split(',').map(|h| format!("http://{h}")).collect();
    let client = etcd::Client::connect(endpoints, None).await?;
    let rtt = time(n, |_| {
        let mut kv = client.kv_client();
        async move { kv.get("/dlock-floor", None).await.map(drop) }
    })
    .await?;
    let pair = time(n, |i| {
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
    Ok(RawFloor::new("get", "txn put-if-absent + head read, delete", rtt, pair))
}
