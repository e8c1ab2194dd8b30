//! Raw floors measured in the same run: the backend's bare round trip, and the bare commands of
//! one acquire + release, sent by the client crate without the lock library.
//!
//! A floor is by definition the store's own client, so each store's testing side measures it
//! ([`StoreSide::floor`]); which statements stand for one acquire + release follows from the
//! target's capabilities.

use std::time::Duration;

use dlock::backend::Capability;
use hdrhistogram::Histogram;
use lock_testkit::side::{RawFloor, StoreSide, time};

use crate::error::{BenchError, Result};
use crate::micros::{hist, us};
use crate::targets::Target;

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

/// The raw client of each store with a server: its testing side's floor, found by the URL's
/// scheme ([`StoreSide::schemes`]); the in-process store's is here.
fn side_of(scheme: &str) -> Option<&'static dyn StoreSide> {
    crate::sides::all().iter().copied().find(|s| s.schemes().contains(&scheme))
}

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
/// without a testing side gets an empty floor (every ratio to it blank) and a note for the
/// report, so the target is still measured.
pub async fn measure(t: &Target, caps: Capability, n: usize) -> Result<(Floor, Option<String>)> {
    let scheme = t.scheme();
    let raw = match (scheme.as_str(), side_of(&scheme)) {
        ("memory", _) => memory(n).await,
        (_, Some(side)) => side.floor(&t.url, caps, n).await,
        (_, None) => {
            let why = BenchError::NoFloor { scheme };
            return Ok((
                Floor::none(),
                Some(format!("{}: {why}; its ratios to the floor are blank", t.name)),
            ));
        }
    };
    let raw = raw.map_err(|source| BenchError::Driver { what: "the raw floor", source })?;
    Ok((floor(raw)?, None))
}

/// The medians and 99th percentiles of a raw floor's samples.
fn floor(raw: RawFloor) -> Result<Floor> {
    let histogram = |samples: &[Duration]| -> Result<Histogram<u64>> {
        let mut h = hist()?;
        samples.iter().for_each(|d| h.saturating_record(us(*d)));
        Ok(h)
    };
    let (rtt, pair) = (histogram(&raw.rtt)?, histogram(&raw.pair)?);
    Ok(Floor {
        rtt_label: raw.rtt_label,
        pair_label: raw.pair_label,
        rtt_p99: Some(rtt.value_at_quantile(0.99)),
        pair_p99: Some(pair.value_at_quantile(0.99)),
        rtt_p50: Some(rtt.value_at_quantile(0.5)),
        pair_p50: Some(pair.value_at_quantile(0.5)),
    })
}

async fn memory(n: usize) -> std::result::Result<RawFloor, lock_testkit::side::DriverError> {
    let m = tokio::sync::Mutex::new(0u64);
    let bump = |_: usize| async {
        *m.lock().await += 1;
        Ok::<_, std::convert::Infallible>(())
    };
    let (rtt, pair) = (time(n, bump).await?, time(n, bump).await?);
    Ok(RawFloor { rtt_label: "tokio Mutex lock+unlock", pair_label: "tokio Mutex lock+unlock", rtt, pair })
}
