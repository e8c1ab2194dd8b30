//! How an acquisition waits between its attempts: woken by the store's release notifications
//! where it has them, else polled with capped, jittered backoff; never past the deadline.

use std::time::Duration;

use tokio::time::Instant;
use tracing::{Instrument, Span};

use super::{NOTIFY_FALLBACK, POLL_BOUND};
use crate::OwnerToken;
use crate::backend::{Backoff, Subscription};
use crate::observe;

/// The waiting side of one acquisition: its subscription, its backoff and its wait metric.
pub(super) struct Wait {
    sub: Option<Subscription>,
    backoff: Backoff,
    /// A queue store's waiter: only a release that names it next (or nobody) wakes it.
    queued: bool,
    /// Who a release must name to wake this waiter (made only once it waits).
    owner_text: Option<String>,
    /// Counted as waiting from the first nap to the outcome, however the acquisition ends.
    waiting: Option<observe::Waiting>,
    /// Entered only while this acquisition sleeps between attempts.
    span: Span,
}

impl Wait {
    pub(super) fn new(poll: (Duration, Duration), queued: bool, once: bool) -> Self {
        let span = if once { Span::none() } else { tracing::debug_span!("dlock.wait") };
        Wait {
            sub: None,
            backoff: Backoff::new(poll.0, poll.1),
            queued,
            owner_text: None,
            waiting: None,
            span,
        }
    }

    /// Whether release notifications reach this acquisition.
    pub(super) fn subscribed(&self) -> bool {
        self.sub.is_some()
    }

    /// Listen through `sub` (none: keep polling).
    pub(super) fn listen(&mut self, sub: Option<Subscription>) {
        self.sub = sub;
    }

    /// An exclusive grant used the wake-up that led to it: the next release wakes the next
    /// waiter, not this one's subscription again.
    pub(super) fn granted(&mut self) {
        if let Some(s) = self.sub.as_mut() {
            s.granted();
        }
    }

    /// The acquisition goes on under a new owner token: releases name that one now.
    pub(super) fn renamed(&mut self) {
        self.owner_text = None;
    }

    /// The pause before retrying after a temporary error.
    pub(super) fn after_error(&mut self) -> Duration {
        self.backoff.next_delay()
    }

    /// Sleep after a refused attempt until a release wakes this waiter, the holder's remaining
    /// lease (`retry_after`, the store's hint) has passed, or `deadline`. A subscription that
    /// closed while waiting is dropped, and the next waits poll.
    pub(super) async fn nap(
        &mut self,
        backend: &'static str,
        owner: OwnerToken,
        retry_after: Option<Duration>,
        deadline: Option<Instant>,
    ) {
        let nap = match (&self.sub, retry_after) {
            (Some(_), Some(hint)) => hint,
            (Some(_), None) => NOTIFY_FALLBACK,
            (None, Some(hint)) => self.backoff.next_delay().min(hint),
            (None, None) => self.backoff.next_delay(),
        };
        if self.waiting.is_none() {
            self.waiting = Some(observe::Waiting::start(backend));
        }
        let now = Instant::now();
        let wake = now.checked_add(nap).unwrap_or(now + POLL_BOUND);
        let wake = deadline.map_or(wake, |d| d.min(wake));
        let span = self.span.clone();
        let queued = self.queued;
        let Some(sub) = self.sub.as_mut() else {
            return tokio::time::sleep_until(wake).instrument(span).await;
        };
        let me = self.owner_text.get_or_insert_with(|| owner.to_string());
        let woken = async { if queued { sub.notified_for(me).await } else { sub.notified_as(me).await } };
        let alive = async {
            tokio::select! {
                // The first ready branch, not a random one: what a random pick could choose, the
                // same every run, so a simulated run replays its seed (`history::sim`).
                biased;
                _ = tokio::time::sleep_until(wake) => true,
                alive = woken => alive,
            }
        };
        if !alive.instrument(span).await {
            self.sub = None;
        }
    }
}
