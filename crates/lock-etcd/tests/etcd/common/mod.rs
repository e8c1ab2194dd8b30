//! Helpers shared by the test binaries (`mod common;` in each; cargo builds only the files
//! directly under `tests/`): backends under a prefix of their own, their lockers, and the keys
//! queued on a lock.

// Each test binary uses its own subset.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use lock_core::{LockBackend, Locker};
use lock_etcd::EtcdLock;
use lock_etcd::etcd_client::{self as etcd, GetOptions};

/// etcd's shortest lease with the test kit's Raft timings.
pub const TTL: Duration = Duration::from_secs(1);

/// A backend on `endpoints` (a lease of its own, `ttl` long) with its keys under `prefix`.
pub async fn etcd_lock(
    endpoints: impl IntoIterator<Item = String>,
    prefix: &str,
    ttl: Duration,
    request_timeout: Duration,
) -> EtcdLock {
    EtcdLock::builder()
        .endpoints(endpoints)
        .prefix(prefix)
        .lease_ttl(ttl)
        .request_timeout(request_timeout)
        .build()
        .await
        .expect("connect to etcd")
}

pub fn locker(e: &EtcdLock) -> Locker {
    Locker::new(Arc::new(e.clone()) as Arc<dyn LockBackend>)
}

/// How many keys are queued under `prefix` (`usize::MAX` when the server does not answer).
pub async fn queued(client: &etcd::Client, prefix: &str) -> usize {
    let opts = GetOptions::new().with_prefix().with_count_only();
    let mut c = client.clone();
    c.get(prefix, Some(opts)).await.map_or(usize::MAX, |r| usize::try_from(r.count()).unwrap_or(0))
}

/// The sum of the series of metric `name` (with `labels`, if any) on a server's `/metrics`.
pub async fn metric(endpoint: &str, series: &str) -> f64 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut conn = tokio::net::TcpStream::connect(endpoint).await.expect("connect for /metrics");
    let req = format!("GET /metrics HTTP/1.0\r\nHost: {endpoint}\r\n\r\n");
    conn.write_all(req.as_bytes()).await.expect("ask /metrics");
    let mut body = String::new();
    conn.read_to_string(&mut body).await.expect("read /metrics");
    body.lines()
        .filter(|l| l.starts_with(series))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}
