//! The task that keeps one hold: pings its connection (the keep-alive and the loss detector),
//! answers renewals, stores notes, and ends the hold when the backend is dropped.

use std::sync::{Arc, Weak};

use tokio::sync::mpsc;
use tokio::time::Instant;

use super::driver::{Ending, Noted, SessionDriver};
use super::link::{Link, Signals, Timing, each};
use super::table::{Cmd, Holds, Live, Slot, take};
use crate::LostReason;

/// Keeps the holding connection for the lock's life (sharing it with the release, which takes
/// it out of the slot and ends the hold in the releasing task, so a release costs no task
/// hand-over). Every request is bounded by the [`Link`] rule: `Uncertain` after one unanswered
/// keep-alive period, `Lost` (and the connection closed) when the server may have ended the
/// session.
pub(crate) struct Keeper<D: SessionDriver> {
    pub(crate) driver: Arc<D>,
    pub(crate) slot: Slot<D::Held>,
    pub(crate) rx: mpsc::Receiver<Cmd>,
    pub(crate) signals: Signals,
    pub(crate) timing: Timing,
    pub(crate) holds: Weak<Holds<D::Held>>,
    pub(crate) key: String,
    pub(crate) id: u64,
}

impl<D: SessionDriver> Keeper<D> {
    /// `confirmed`: the anchor of the grant. The first ping is due one period after it, as
    /// after any ping.
    pub(crate) async fn run(mut self, confirmed: Instant) {
        let mut next = confirmed + self.timing.every;
        loop {
            tokio::select! {
                cmd = self.rx.recv() => match cmd {
                    Some(Cmd::Ping(reply)) => {
                        let alive = self.ping().await;
                        let _ = reply.send(alive);
                        if !alive {
                            return;
                        }
                        next = Instant::now() + self.timing.every;
                    }
                    Some(Cmd::Note(note, reply)) => match self.note(&note).await {
                        Some(Noted::Answered(out)) => {
                            let _ = reply.send(out);
                            next = Instant::now() + self.timing.every;
                        }
                        Some(Noted::Lost) | None => {
                            let _ = reply.send(Ok(false));
                            return;
                        }
                    },
                    None => return self.abandon().await,
                },
                _ = tokio::time::sleep_until(next) => {
                    if !self.ping().await {
                        return;
                    }
                    next = Instant::now() + self.timing.every;
                }
            }
        }
    }

    /// One bounded ping: `true` when the server answered; `false` when the hold was lost (now
    /// given up) or released meanwhile (its connection taken).
    async fn ping(&mut self) -> bool {
        let slot = self.slot.clone();
        let mut guard = slot.lock().await;
        let Some(live) = guard.as_mut() else { return false };
        let mut link = Link::new(&self.signals, &self.key, self.timing, &live.confirmed);
        match link.send(self.driver.ping(&mut live.held)).await {
            Some(Ok(())) => {
                link.confirm();
                true
            }
            Some(Err(e)) => {
                tracing::warn!(key = %self.key, error = %e, "connection holding a lock died");
                self.lost(&mut guard);
                false
            }
            None => {
                self.lost(&mut guard);
                false
            }
        }
    }

    /// Store `note` through the driver: `None` when the hold was released meanwhile.
    async fn note(&mut self, note: &str) -> Option<Noted> {
        let slot = self.slot.clone();
        let mut guard = slot.lock().await;
        let live = guard.as_mut()?;
        let mut link = Link::new(&self.signals, &self.key, self.timing, &live.confirmed);
        let noted = self.driver.note(&self.key, &mut live.held, note, &mut link).await;
        match noted {
            Noted::Answered(_) => link.confirm(),
            Noted::Lost => self.lost(&mut guard),
        }
        Some(noted)
    }

    /// Every sender is gone: released (the connection was taken first), or the backend was
    /// dropped: then end the hold, bounded as a ping is (unanswered, the connection is closed
    /// and the server frees the lock as it ends the session).
    async fn abandon(self) {
        let live = self.slot.lock().await.take();
        if let Some(live) = live {
            let mut link = Link::new(&self.signals, &self.key, self.timing, &live.confirmed);
            let _ = link.send(self.driver.end(&self.key, live.held, Ending::Abandon)).await;
        }
    }

    /// The connection died or went silent past the server's idle bound: the lock is (or will
    /// at once be) free for others. Every guard of the hold is told; the connection is closed,
    /// so a server that still has the session ends it now.
    ///
    /// Under the slot's lock (`guard`), so that a release waiting for it finds the connection
    /// gone and answers `false` rather than ending a hold that is no longer there.
    fn lost(&self, guard: &mut Option<Live<D::Held>>) {
        // Out of the table first: a guard woken by the signal may at once acquire again with
        // the same owner, and must not nest into this dead hold.
        if let Some(holds) = self.holds.upgrade() {
            take(&mut holds.lock(), &self.key, |h| h.id == self.id);
        }
        each(&self.signals, |s| s.mark_lost(LostReason::SessionEnded));
        // Then the connection drops unended: the driver closes it, never pools it.
        drop(guard.take());
    }
}
