//! What the library tells the outside: `tracing` spans and events, and metrics through the
//! [`metrics`](https://docs.rs/metrics) facade (feature `metrics`), so the application picks the
//! exporter (Prometheus, OpenTelemetry, StatsD).
//!
//! Every metric carries a `backend` label ([`LockBackend::name`](crate::LockBackend::name):
//! `memory`, `redis`, `mysql`, `zk`, `quorum`, ...) and never the key: keys are unbounded in
//! number, and a label per key would grow the exporter without end. Keys appear in spans and
//! events instead.
//!
//! | metric | kind | labels | what |
//! |---|---|---|---|
//! | [`ACQUIRE_TOTAL`] | counter | `backend`, `outcome` = `acquired` \| `busy` \| `timeout` \| `error` | acquisitions by how they ended (`busy`: `try_acquire` found the key held) |
//! | [`ACQUIRE_WAIT_SECONDS`] | histogram | `backend`, `outcome` | time from the call to its outcome |
//! | [`HOLD_SECONDS`] | histogram | `backend`, `end` = `released` \| `dropped` \| `lost` \| `abandoned` | time from grant to the guard's end |
//! | [`HELD`] | gauge | `backend` | guards alive now |
//! | [`WAITING`] | gauge | `backend` | acquisitions waiting now (after their first refusal) |
//! | [`RENEW_TOTAL`] | counter | `backend`, `outcome` = `renewed` \| `not_owner` \| `error` | lease renewals, per lease (watchdog and `LockGuard::renew`) |
//! | [`RELEASE_TOTAL`] | counter | `backend`, `outcome` = `released` \| `not_owner` \| `error` | releases sent |
//! | [`LOST_TOTAL`] | counter | `backend`, `reason` = `not_owner` \| `deadline_passed` \| `session_ended` \| `backend_error` | holds known lost |
//! | [`UNCERTAIN_TOTAL`] | counter | `backend` | holds that became uncertain (a renewal or session in doubt) |
//!
//! Spans (target `lock_core`): `dlock.acquire` (fields `backend`, `key`, `wait`, then `outcome`,
//! `fence`), `dlock.wait` inside it once the first attempt finds the key held, `dlock.renew`
//! (`backend`, `leases`) and `dlock.release` (`backend`, `key`). The lost and uncertain
//! transitions are events at `warn` with `backend`, `key` and `reason`.

use std::time::Duration;

use crate::LostReason;

/// Counter: acquisitions by outcome.
pub const ACQUIRE_TOTAL: &str = "dlock_acquire_total";
/// Histogram (seconds): time from the acquire call to its outcome.
pub const ACQUIRE_WAIT_SECONDS: &str = "dlock_acquire_wait_seconds";
/// Histogram (seconds): time a hold lasted, from grant to the guard's end.
pub const HOLD_SECONDS: &str = "dlock_hold_seconds";
/// Gauge: guards alive now.
pub const HELD: &str = "dlock_held";
/// Gauge: acquisitions waiting now, from their first refusal to their outcome.
pub const WAITING: &str = "dlock_waiting";
/// Counter: lease renewals by outcome, one per lease.
pub const RENEW_TOTAL: &str = "dlock_renew_total";
/// Counter: releases by outcome.
pub const RELEASE_TOTAL: &str = "dlock_release_total";
/// Counter: holds known lost, by reason.
pub const LOST_TOTAL: &str = "dlock_lost_total";
/// Counter: holds that became uncertain.
pub const UNCERTAIN_TOTAL: &str = "dlock_uncertain_total";

/// How an acquisition ended.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Outcome {
    Acquired,
    Busy,
    Timeout,
    Error,
}

impl Outcome {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Outcome::Acquired => "acquired",
            Outcome::Busy => "busy",
            Outcome::Timeout => "timeout",
            Outcome::Error => "error",
        }
    }
}

/// How a hold ended.
#[derive(Clone, Copy, Debug)]
pub(crate) enum HoldEnd {
    Released,
    Dropped,
    Lost,
    Abandoned,
}

pub(crate) fn reason_label(reason: LostReason) -> &'static str {
    match reason {
        LostReason::NotOwner => "not_owner",
        LostReason::DeadlinePassed => "deadline_passed",
        LostReason::SessionEnded => "session_ended",
        LostReason::BackendError => "backend_error",
    }
}

#[cfg(feature = "metrics")]
mod emit {
    use super::*;

    pub(crate) fn acquire(backend: &'static str, outcome: Outcome, took: Duration) {
        let outcome = outcome.as_str();
        metrics::counter!(ACQUIRE_TOTAL, "backend" => backend, "outcome" => outcome).increment(1);
        metrics::histogram!(ACQUIRE_WAIT_SECONDS, "backend" => backend, "outcome" => outcome)
            .record(took.as_secs_f64());
    }

    pub(crate) fn hold_started(backend: &'static str) {
        metrics::gauge!(HELD, "backend" => backend).increment(1.0);
    }

    pub(crate) fn hold_ended(backend: &'static str, end: HoldEnd, held: Duration) {
        let end = match end {
            HoldEnd::Released => "released",
            HoldEnd::Dropped => "dropped",
            HoldEnd::Lost => "lost",
            HoldEnd::Abandoned => "abandoned",
        };
        metrics::gauge!(HELD, "backend" => backend).decrement(1.0);
        metrics::histogram!(HOLD_SECONDS, "backend" => backend, "end" => end).record(held.as_secs_f64());
    }

    /// One acquisition waiting, counted in [`WAITING`] until dropped.
    pub(crate) struct Waiting(&'static str);

    impl Waiting {
        pub(crate) fn start(backend: &'static str) -> Self {
            metrics::gauge!(WAITING, "backend" => backend).increment(1.0);
            Waiting(backend)
        }
    }

    impl Drop for Waiting {
        fn drop(&mut self) {
            metrics::gauge!(WAITING, "backend" => self.0).decrement(1.0);
        }
    }

    pub(crate) fn renew(backend: &'static str, outcome: &'static str, leases: usize) {
        metrics::counter!(RENEW_TOTAL, "backend" => backend, "outcome" => outcome).increment(leases as u64);
    }

    pub(crate) fn release(backend: &'static str, outcome: &'static str) {
        metrics::counter!(RELEASE_TOTAL, "backend" => backend, "outcome" => outcome).increment(1);
    }

    pub(crate) fn lost(backend: &'static str, reason: LostReason) {
        metrics::counter!(LOST_TOTAL, "backend" => backend, "reason" => reason_label(reason)).increment(1);
    }

    pub(crate) fn uncertain(backend: &'static str) {
        metrics::counter!(UNCERTAIN_TOTAL, "backend" => backend).increment(1);
    }
}

/// Without the feature every call is empty and compiles away.
#[cfg(not(feature = "metrics"))]
mod emit {
    use super::*;

    pub(crate) struct Waiting;

    impl Waiting {
        pub(crate) fn start(_: &'static str) -> Self {
            Waiting
        }
    }

    pub(crate) fn acquire(_: &'static str, _: Outcome, _: Duration) {}
    pub(crate) fn hold_started(_: &'static str) {}
    pub(crate) fn hold_ended(_: &'static str, _: HoldEnd, _: Duration) {}
    pub(crate) fn renew(_: &'static str, _: &'static str, _: usize) {}
    pub(crate) fn release(_: &'static str, _: &'static str) {}
    pub(crate) fn lost(_: &'static str, _: LostReason) {}
    pub(crate) fn uncertain(_: &'static str) {}
}

pub(crate) use emit::*;
