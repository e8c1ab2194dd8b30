//! Raw floors measured in the same run: the backend's bare round trip, and the bare commands of
//! one acquire + release, sent by the client crate without the lock library.
//!
//! A floor is by definition the store's own client, so [`PROBES`] is the one place that pairs
//! URL schemes with drivers; which statements stand for one acquire + release follows from the
//! target's capabilities.

use std::future::Future;
use std::pin::Pin;

use dlock::backend::Capability;
use hdrhistogram::Histogram;
use tokio::time::Instant;

use crate::error::{BenchError, Result};
use crate::micros::{hist, us};
use crate::targets::Target;

#[cfg(any(feature = "etcd", feature = "zk"))]
mod consensus;
#[cfg(feature = "redis")]
mod redis;
#[cfg(any(feature = "mysql", feature = "postgres"))]
mod sql;

/// The floor of one target.
#[derive(Debug)]
pub struct Floor {
    /// What the round trip is (`PING`, `SELECT 1`, `exists`).
    pub rtt_label: &'static str,
    /// What the acquire+release pair is.
    pub pair_label: &'static str,
    /// 99th percentile round trip (µs); `None` without a floor for the scheme.
    pub rtt_p99: Option<u64>,
    /// 99th percentile acquire+release pair (µs).
    pub pair_p99: Option<u64>,
    /// Median round trip (µs).
    pub rtt_p50: Option<u64>,
    /// Median acquire+release pair (µs).
    pub pair_p50: Option<u64>,
}

type FloorFuture<'a> = Pin<Box<dyn Future<Output = Result<Floor>> + Send + 'a>>;

/// A raw client that measures the floor of the URLs with these schemes.
struct Probe {
    schemes: &'static [&'static str],
    measure: for<'a> fn(&'a str, Capability, usize) -> FloorFuture<'a>,
}

const PROBES: &[Probe] = &[
    Probe { schemes: &["memory"], measure: |_, _, n| Box::pin(memory(n)) },
    #[cfg(feature = "redis")]
    Probe { schemes: &["redis", "rediss"], measure: |url, _, n| Box::pin(redis::redis(url, n)) },
    #[cfg(feature = "redis")]
    Probe { schemes: &["redis+cluster"], measure: |url, _, n| Box::pin(redis::redis_cluster(url, n)) },
    #[cfg(feature = "redis")]
    Probe { schemes: &["redis+sentinel"], measure: |url, _, n| Box::pin(redis::redis_sentinel(url, n)) },
    #[cfg(feature = "redis")]
    Probe { schemes: &["redlock"], measure: |url, _, n| Box::pin(redis::redlock(url, n)) },
    #[cfg(feature = "mysql")]
    Probe { schemes: &["mysql", "mariadb"], measure: |url, caps, n| Box::pin(sql::mysql(url, caps, n)) },
    #[cfg(feature = "zk")]
    Probe { schemes: &["zk", "zookeeper"], measure: |url, _, n| Box::pin(consensus::zk(url, n)) },
    #[cfg(feature = "etcd")]
    Probe { schemes: &["etcd"], measure: |url, _, n| Box::pin(consensus::etcd(url, n)) },
    #[cfg(feature = "postgres")]
    Probe { schemes: &["postgres", "postgresql"], measure: |url, _, n| Box::pin(sql::postgres(url, n)) },
];

impl Floor {
    /// No raw client pairs with this scheme (`rediss+cluster://`, or a backend feature left
    /// out): the target still runs, its figures have no floor to be divided by.
    fn none() -> Self {
        Floor {
            rtt_label: "none (no raw client for this scheme)",
            pair_label: "none",
            rtt_p99: None,
            pair_p99: None,
            rtt_p50: None,
            pair_p50: None,
        }
    }
}

/// Measure the floor of `t` (whose backend declares `caps`) with `n` samples each. A scheme
/// without a [`Probe`] gets an empty floor (every ratio to it blank) and a note for the
/// report, so the target is still measured.
pub async fn measure(t: &Target, caps: Capability, n: usize) -> Result<(Floor, Option<String>)> {
    let scheme = t.scheme();
    let probe = PROBES.iter().find(|p| p.schemes.contains(&scheme.as_str()));
    match probe {
        Some(p) => Ok(((p.measure)(&t.url, caps, n).await?, None)),
        None => Ok((
            Floor::none(),
            Some(format!(
                "{}: {}; its ratios to the floor are blank",
                t.name,
                BenchError::NoFloor { scheme }
            )),
        )),
    }
}

async fn time<F, Fut, E>(what: &'static str, n: usize, mut f: F) -> Result<Histogram<u64>>
where
    F: FnMut(usize) -> Fut,
    Fut: Future<Output = Result<(), E>>,
    E: Into<crate::error::DriverError>,
{
    let mut h = hist()?;
    for i in 0..n {
        let t0 = Instant::now();
        f(i).await.map_err(BenchError::driver(what))?;
        h.saturating_record(us(t0.elapsed()));
    }
    Ok(h)
}

fn floor(
    rtt_label: &'static str,
    pair_label: &'static str,
    rtt: Histogram<u64>,
    pair: Histogram<u64>,
) -> Floor {
    let (r, p) = (rtt.value_at_quantile(0.5), pair.value_at_quantile(0.5));
    let (r99, p99) = (rtt.value_at_quantile(0.99), pair.value_at_quantile(0.99));
    Floor {
        rtt_label,
        pair_label,
        rtt_p99: Some(r99),
        pair_p99: Some(p99),
        rtt_p50: Some(r),
        pair_p50: Some(p),
    }
}

async fn memory(n: usize) -> Result<Floor> {
    let m = tokio::sync::Mutex::new(0u64);
    let bump = |_: usize| async {
        *m.lock().await += 1;
        Ok::<_, std::convert::Infallible>(())
    };
    let rtt = time("memory floor", n, bump).await?;
    let pair = time("memory floor", n, bump).await?;
    Ok(floor("tokio Mutex lock+unlock", "tokio Mutex lock+unlock", rtt, pair))
}

/// The URL without its query: the floor's raw client takes none of the backend's options.
#[cfg(any(feature = "redis", feature = "mysql", feature = "postgres"))]
fn strip_query(url: &str) -> &str {
    url.split_once('?').map_or(url, |(u, _)| u)
}
