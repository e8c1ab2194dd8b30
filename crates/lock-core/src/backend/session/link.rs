//! One rule for every request on a holding connection: `Uncertain` at the first unanswered
//! keep-alive period, given up when the server may have ended the session.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::LeaseSignal;
use crate::backend::{Confirmed, Mutex, session_give_up};

/// The lost signals of every acquisition of one hold (a nesting from another `Locker` brings
/// its own).
pub(crate) type Signals = Arc<Mutex<Vec<LeaseSignal>>>;

/// Run `f` on every guard's signal of a hold.
pub(crate) fn each(signals: &Mutex<Vec<LeaseSignal>>, f: impl Fn(&LeaseSignal)) {
    signals.lock().iter().for_each(f);
}

/// The keep-alive period and the server's idle bound of a backend's holds.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Timing {
    pub(crate) every: Duration,
    pub(crate) server_idle: Duration,
}

/// A hold's connection as seen by a request on it: every request is bounded the way the
/// keeper bounds its pings. Without an answer one keep-alive period after its send, every
/// guard of the hold is told `Uncertain`; when nothing has been confirmed for the server's
/// idle bound (counted from when the last confirmed request was *sent*: the server's clock
/// started no earlier) less the drift margin, the request is abandoned, because by then the
/// server may have ended the session and freed the lock.
#[derive(Debug)]
pub struct Link<'a> {
    signals: &'a Mutex<Vec<LeaseSignal>>,
    key: &'a str,
    timing: Timing,
    /// Send time of the last request the server answered on this connection (the hold's
    /// guards read their deadline from it too).
    confirmed: &'a Confirmed,
    /// Send time of the last request sent through this link.
    sent: Option<Instant>,
}

impl<'a> Link<'a> {
    pub(crate) fn new(
        signals: &'a Mutex<Vec<LeaseSignal>>,
        key: &'a str,
        timing: Timing,
        confirmed: &'a Confirmed,
    ) -> Self {
        Link { signals, key, timing, confirmed, sent: None }
    }

    /// Await `request`, sent now on the holding connection: `None` when it was abandoned (the
    /// hold must then be given up; dropping the request closes its connection).
    pub async fn send<T, E>(
        &mut self,
        request: impl Future<Output = std::result::Result<T, E>>,
    ) -> Option<std::result::Result<T, E>> {
        let sent = Instant::now();
        self.sent = Some(sent);
        let uncertain_at = sent + self.timing.every;
        let give_up = session_give_up(self.confirmed.at(), self.timing.server_idle);
        tokio::pin!(request);
        let mut uncertain = false;
        loop {
            tokio::select! {
                r = &mut request => return Some(r),
                _ = tokio::time::sleep_until(uncertain_at), if !uncertain => {
                    uncertain = true;
                    each(self.signals, LeaseSignal::mark_uncertain);
                }
                _ = tokio::time::sleep_until(give_up) => {
                    let key = self.key;
                    tracing::warn!(%key, "no answer from the server within its idle bound; the lock is given up");
                    return None;
                }
            }
        }
    }

    /// The last request's answer shows the session alive: the server's idle clock restarted no
    /// earlier than that request's send, and every guard is told the hold is confirmed.
    pub fn confirm(&mut self) {
        if let Some(sent) = self.sent {
            self.confirmed.confirm(sent);
            each(self.signals, LeaseSignal::mark_held);
        }
    }
}
