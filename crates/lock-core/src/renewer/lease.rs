//! One lease as the watchdog keeps it: its schedule (renewed a third into the lease, retried
//! sooner after a failure) and its local deadline, which only ever moves later.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::{LeaseSignal, OwnerToken};

/// Renew when a third of the lease has passed (Redisson: 30 s lease, renewed every 10 s).
pub(super) fn period(lease: Duration) -> Duration {
    lease / 3
}

/// After a temporary failure, retry sooner than a full period.
pub(super) fn retry_interval(lease: Duration) -> Duration {
    (lease / 10).clamp(Duration::from_millis(5), Duration::from_secs(1))
}

/// Leases due within this window are renewed together with the ones due now. Smaller than
/// the retry interval, so a failing backend is not hammered.
pub(super) fn coalesce_window(lease: Duration) -> Duration {
    (period(lease) / 2).min(retry_interval(lease) / 2)
}

/// A granted lease, as the acquisition saw it; [`Renewer::register`] derives its schedule.
pub(crate) struct NewLease {
    pub key: Arc<str>,
    pub owner: OwnerToken,
    /// The lease asked for (and renewed with).
    pub lease: Duration,
    /// Renewed by the watchdog (no lease given by the caller).
    pub auto: bool,
    /// The lease the backend granted, counted from `sent_at`; `None` for session-bound holds.
    pub granted: Option<Duration>,
    /// When the granting request was sent: the lease counts from here, never from the answer.
    pub sent_at: Instant,
    /// Clock-drift margin kept between the local deadline and the server's expiry.
    pub margin: Duration,
    /// Maximum hold time: no renewal is sent past this instant.
    pub renew_until: Option<Instant>,
    pub signal: LeaseSignal,
    /// The backend grants in advance (`Capability::early_grants`): a grant shorter than asked
    /// is topped up.
    pub early: bool,
}

pub(super) struct Entry {
    pub(super) key: Arc<str>,
    pub(super) owner: OwnerToken,
    pub(super) lease: Duration,
    pub(super) auto: bool,
    /// Local lease deadline, already shortened by `margin`; `None` for session-bound leases.
    pub(super) confirmed_until: Option<Instant>,
    pub(super) margin: Duration,
    pub(super) next_due: Instant,
    pub(super) renew_until: Option<Instant>,
    pub(super) signal: LeaseSignal,
    /// Granted shorter than asked and not renewed by the watchdog: renewed once, to the lease
    /// asked for.
    pub(super) top_up: bool,
}

impl Entry {
    /// When the task must next look at this lease: its deadline, or its renewal.
    pub(super) fn first_event(&self) -> Option<Instant> {
        let renew = ((self.auto || self.top_up) && self.renew_until.is_none_or(|u| self.next_due < u))
            .then_some(self.next_due);
        match (self.confirmed_until, renew) {
            (Some(d), Some(r)) => Some(d.min(r)),
            (d, r) => d.or(r),
        }
    }

    /// A renewal sent at `sent_at` for `lease` was confirmed: the deadline only ever moves later.
    pub(super) fn extend(&mut self, sent_at: Instant, lease: Duration) {
        if let Some(d) = self.confirmed_until {
            let d = d.max(local_deadline(sent_at, lease, self.margin));
            self.confirmed_until = Some(d);
            self.signal.extend_deadline(d);
        }
        self.next_due = sent_at + period(lease);
        self.signal.mark_held();
    }
}

/// The local deadline of a lease confirmed by a request sent at `sent_at`: the server counts
/// the lease from when it received the request, later than `sent_at`, and `margin` absorbs the
/// drift between the two clocks. Never in the past of `sent_at`.
pub(super) fn local_deadline(sent_at: Instant, lease: Duration, margin: Duration) -> Instant {
    sent_at + lease.saturating_sub(margin)
}
