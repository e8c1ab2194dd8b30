//! One measured figure: what the scenarios produce, the report tabulates and the curves plot.

use hdrhistogram::Histogram;
use serde_json::{Map, Value, json};

use crate::targets::Target;

/// One measured figure.
#[derive(Debug, Clone)]
pub struct Row {
    pub target: String,
    pub scenario: String,
    pub metric: String,
    /// Latency percentiles in µs, when the figure is a latency.
    pub p50: Option<u64>,
    pub p99: Option<u64>,
    pub max: Option<u64>,
    pub samples: Option<u64>,
    /// Throughput (ops/s) or the scenario's own figure.
    pub value: Option<f64>,
    /// p50 divided by the floor's p50 measured in the same run.
    pub ratio: Option<f64>,
    /// `acquire()` with a wait and the watchdog: its p50 over `try_acquire`'s with a fixed
    /// lease, both taken in turn in the same run.
    pub vs_try_acquire: Option<f64>,
    /// `try_acquire` calls that reached the backend per acquisition (wake-ups show here).
    pub attempts: Option<f64>,
    /// Allocator calls per operation (process-wide, connection tasks included).
    pub allocs: Option<f64>,
    /// Bytes allocated per operation.
    pub alloc_bytes: Option<f64>,
    pub extra: Map<String, Value>,
}

impl Row {
    pub fn new(t: &Target, scenario: &str, metric: &str) -> Self {
        Row {
            target: t.name.clone(),
            scenario: scenario.to_owned(),
            metric: metric.to_owned(),
            p50: None,
            p99: None,
            max: None,
            samples: None,
            value: None,
            ratio: None,
            vs_try_acquire: None,
            attempts: None,
            allocs: None,
            alloc_bytes: None,
            extra: Map::new(),
        }
    }

    pub fn latency(
        t: &Target,
        scenario: &str,
        metric: &str,
        h: &Histogram<u64>,
        ops: Option<f64>,
        floor_p50: Option<u64>,
    ) -> Self {
        let mut r = Row::new(t, scenario, metric);
        let p50 = h.value_at_quantile(0.5);
        r.p50 = Some(p50);
        r.p99 = Some(h.value_at_quantile(0.99));
        r.max = Some(h.max());
        r.samples = Some(h.len());
        r.value = ops;
        r.ratio = floor_p50.filter(|f| *f > 0).map(|f| p50 as f64 / f as f64);
        r
    }

    /// p99 over p50: how long the tail is (the "no herd" target reads it at 32 clients).
    pub fn tail(&self) -> Option<f64> {
        match (self.p50, self.p99) {
            (Some(a), Some(b)) if a > 0 => Some(b as f64 / a as f64),
            _ => None,
        }
    }

    pub fn json(&self) -> Value {
        json!({
            "target": self.target, "scenario": self.scenario, "metric": self.metric,
            "p50_us": self.p50, "p99_us": self.p99, "max_us": self.max, "samples": self.samples,
            "value": self.value, "ratio_to_floor": self.ratio, "p99_over_p50": self.tail(),
            "ratio_to_try_acquire": self.vs_try_acquire, "attempts_per_acquisition": self.attempts,
            "allocs_per_op": self.allocs, "alloc_bytes_per_op": self.alloc_bytes, "extra": self.extra,
        })
    }
}
