//! When the server last heard from a client, as the client can bound it: the send time of the
//! last request it answered. A server that keeps what a client holds for a TTL or a session
//! timeout after it last heard from it keeps it at least that long after this.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::backend::Mutex;

/// Send time of the last request the server answered on one session or lease: the server ends
/// it a TTL (or session timeout) after it last heard from us, which is no earlier. Clones share
/// the time.
#[derive(Clone, Debug)]
pub struct Confirmed(Arc<Mutex<Instant>>);

impl Confirmed {
    /// Confirmed by the request (or grant) sent at `sent`.
    pub fn new(sent: Instant) -> Confirmed {
        Confirmed(Arc::new(Mutex::new(sent)))
    }

    /// A request sent at `sent` was answered; an earlier send never moves the time back.
    pub fn confirm(&self, sent: Instant) {
        let mut c = self.0.lock();
        if sent > *c {
            *c = sent;
        }
    }

    /// Send time of the last confirmed request.
    pub fn at(&self) -> Instant {
        *self.0.lock()
    }

    /// Set the time outright (tests move a deadline with it).
    pub fn set(&self, sent: Instant) {
        *self.0.lock() = sent;
    }

    /// When the holds must be given up: `ttl` after the last confirmed send, less the core's
    /// drift margin for `clock_drift` (rate, floor).
    pub fn give_up_at(&self, ttl: Duration, clock_drift: (f64, Duration)) -> Instant {
        self.at() + span(ttl, clock_drift)
    }
}

/// How long after a confirmed send the holds stay: `ttl` less the drift margin.
pub fn span(ttl: Duration, (rate, floor): (f64, Duration)) -> Duration {
    ttl.saturating_sub(crate::drift_margin(ttl, rate, floor))
}
