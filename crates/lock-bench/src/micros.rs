//! Latencies in whole microseconds, the unit of every histogram of the bench (the scenarios'
//! and the floors').

use std::time::Duration;

use hdrhistogram::Histogram;

use crate::error::Result;

/// A latency histogram in µs, up to two minutes.
pub fn hist() -> Result<Histogram<u64>> {
    Ok(Histogram::new_with_bounds(1, 120_000_000, 3)?)
}

/// Whole µs, at least 1 (the histogram's lowest value).
pub fn us(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX).max(1)
}
