//! The task that gives up the holds of a session or lease shared by many when its last
//! confirmed request gets too old.

use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use super::QueueHolds;
use crate::backend::Confirmed;

/// What the deadline keeper asks of the backend it keeps.
pub trait Holder: Send + Sync + 'static {
    /// The holds of this client.
    fn holds(&self) -> &QueueHolds;
    /// The deadline of session `generation` passed with holds on it: give them up. `true`
    /// when the session goes on (later grants on it get their own deadline), `false` when it
    /// ended with this.
    fn give_up(&self, generation: u64) -> bool;
}

/// How the keeper waits while its session holds nothing.
#[derive(Clone, Debug)]
pub enum Idle {
    /// Until a new hold is signalled (a stored wake-up counts): for grants that may come
    /// close to the deadline.
    Notified(Arc<Notify>),
    /// A fixed pause between looks: for grants that always come with a fresh confirmation.
    Every(Duration),
}

/// The deadline of one session's holds, kept by [`DeadlineKeeper::run`].
#[derive(Debug)]
pub struct DeadlineKeeper<B> {
    /// The backend (weakly: the task ends with it).
    pub backend: Weak<B>,
    /// The session it keeps.
    pub generation: u64,
    /// Its last confirmed send.
    pub confirmed: Confirmed,
    /// The server's bound after the last request it heard: the TTL or session timeout.
    pub ttl: Duration,
    /// The core's clock drift (rate, floor) taken off `ttl`.
    pub clock_drift: (f64, Duration),
    /// How it waits while nothing is held.
    pub idle: Idle,
    /// What the warning says went unconfirmed, e.g. "etcd lease not confirmed within its ttl".
    pub what: &'static str,
}

impl<B: Holder> DeadlineKeeper<B> {
    /// When nothing has been confirmed for a TTL less the drift margin (disconnected, server
    /// paused, partitioned), give the holds of the session up: the server may end it from then
    /// on and let another client in. Its own task on its own timer, so that neither a
    /// heartbeat's tick nor a request awaiting its answer can delay it.
    pub async fn run(self) {
        loop {
            let at = self.confirmed.give_up_at(self.ttl, self.clock_drift);
            {
                let Some(backend) = self.backend.upgrade() else { return };
                if !backend.holds().has(self.generation) {
                    drop(backend);
                    match &self.idle {
                        Idle::Notified(new_hold) => new_hold.notified().await,
                        Idle::Every(pause) => tokio::time::sleep(*pause).await,
                    }
                    continue;
                }
                if Instant::now() >= at {
                    tracing::warn!(generation = self.generation, "{}; locks given up", self.what);
                    if !backend.give_up(self.generation) {
                        return;
                    }
                    continue;
                }
            }
            // Confirmations only move the deadline later: recompute it on waking.
            tokio::time::sleep_until(at).await;
        }
    }
}
