//! The hold table of one backend: nesting of one owner without a round trip, every guard's
//! signal, renewal as a ping, notes and release.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use super::bound::no_answer;
use super::driver::{Ending, SessionDriver};
use super::grant::{Granted, anchor};
use super::keeper::Keeper;
use super::link::{Link, Timing, each};
use super::table::{Cmd, Hold, Holds, Live, find, take};
use crate::backend::{AcquireRequest, Attempt, Confirmed, Grant, Mutex, RenewItem, session_span};
use crate::{FencingToken, LeaseSignal, LostReason, OwnerToken, Result};

/// Commands queued to one hold's keeper: a renewal or two and a note at most are ever in
/// flight, so senders never wait.
const KEEPER_QUEUE: usize = 4;

/// The session-bound holds of one backend, kept by one [`SessionDriver`]: a keeper task per
/// hold pings its connection (the lost signal, `Uncertain` then `Lost`), renewal is a ping, a
/// nested acquisition by the holder is counted here only (the hold stays one lock on the
/// server), and release ends the hold in the releasing task.
pub struct Sessions<D: SessionDriver> {
    driver: Arc<D>,
    timing: Timing,
    holds: Arc<Holds<D::Held>>,
    next_id: AtomicU64,
}

impl<D: SessionDriver> fmt::Debug for Sessions<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sessions")
            .field("keepalive", &self.timing.every)
            .field("server_idle", &self.timing.server_idle)
            .field("held", &self.holds.lock().len())
            .finish()
    }
}

impl<D: SessionDriver> Sessions<D> {
    /// Holds pinged every `keepalive`, on sessions the server ends after `server_idle` without
    /// a request (the client gives a hold up a drift margin earlier).
    pub fn new(driver: D, keepalive: Duration, server_idle: Duration) -> Self {
        Sessions {
            driver: Arc::new(driver),
            timing: Timing { every: keepalive, server_idle },
            holds: Arc::default(),
            next_id: AtomicU64::new(0),
        }
    }

    /// The driver.
    pub fn driver(&self) -> &D {
        &self.driver
    }

    /// The server's idle bound on a holding session.
    pub fn server_idle(&self) -> Duration {
        self.timing.server_idle
    }

    /// The server's id of the session holding `key`, if held here.
    pub fn held_session(&self, key: &str) -> Option<u64> {
        self.holds.lock().get(key)?.iter().find(|h| !h.cmd.is_closed()).map(|h| h.session)
    }

    /// A nested acquisition by the holder of `key`: the hold's fencing token, with no round
    /// trip. `None` when `owner` holds no live hold of `key` here.
    pub fn reenter(&self, key: &str, owner: OwnerToken, signal: &LeaseSignal) -> Option<FencingToken> {
        let mut holds = self.holds.lock();
        let h = find(&mut holds, key, owner).filter(|h| !h.cmd.is_closed())?;
        // A hold already known lost is gone on the server: never nest into it.
        if h.signals.lock().iter().any(LeaseSignal::is_lost) {
            return None;
        }
        h.count += 1;
        // A nesting through the same `Locker` carries the hold's own signal: keep each once.
        let mut signals = h.signals.lock();
        if !signals.iter().any(|s| s.same_as(signal)) {
            if let Some(first) = signals.first() {
                signal.kept_as(first);
            }
            signals.push(signal.clone());
        }
        Some(FencingToken(h.fence))
    }

    /// A nested acquisition by the holder of `req.key`, answered from the hold table with no
    /// round trip (the hold stays one lock on the server). `None` when `req.owner` holds no live
    /// hold of it here.
    pub fn nested(&self, req: &AcquireRequest<'_>) -> Option<Attempt> {
        let fence = self.reenter(req.key, req.owner, req.signal)?;
        Some(Attempt::Acquired(Grant { fence, lease: None, slot: None }))
    }

    /// One acquisition: a nesting from the hold table, else `attempt` (a lock taken on the
    /// server, `None` when held elsewhere) recorded as a hold.
    ///
    /// # Errors
    /// The attempt's, or the confirming ping's (see [`hold`](Self::hold)).
    pub async fn acquire<F, Fut>(&self, req: &AcquireRequest<'_>, attempt: F) -> Result<Attempt>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<Option<Granted<D::Held>>>>,
    {
        if let Some(nested) = self.nested(req) {
            return Ok(nested);
        }
        match attempt().await? {
            Some(granted) => self.hold(req, granted).await,
            None => Ok(Attempt::Held { retry_after: None }),
        }
    }

    /// Record a granted lock as the hold of `req.owner` and start its keeper; a grant after a
    /// long wait is first confirmed by a ping (see [`Granted::answered`]).
    ///
    /// # Errors
    /// The confirming ping failed or went unanswered: the connection closes with `g`.
    pub async fn hold(&self, req: &AcquireRequest<'_>, mut g: Granted<D::Held>) -> Result<Attempt> {
        let anchored = anchor(&*self.driver, &mut g, self.timing.every, self.timing.server_idle).await?;
        let confirmed = Confirmed::new(anchored);
        // The server ends the session its idle bound after it last heard from us: past that,
        // less the drift margin, the guards read the hold lost even before the keeper (or a
        // request on the connection) has run to tell them.
        req.signal.kept_by(&confirmed, session_span(self.timing.server_idle));
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::channel(KEEPER_QUEUE);
        let signals = Arc::new(Mutex::new(vec![req.signal.clone()]));
        let slot = Arc::new(tokio::sync::Mutex::new(Some(Live { held: g.held, confirmed })));
        let keeper = Keeper {
            driver: self.driver.clone(),
            slot: slot.clone(),
            rx,
            signals: signals.clone(),
            timing: self.timing,
            holds: Arc::downgrade(&self.holds),
            key: req.key.to_owned(),
            id,
        };
        let hold = Hold {
            id,
            owner: req.owner,
            count: 1,
            shared: req.side.is_shared(),
            fence: g.fence,
            session: g.session,
            cmd: tx,
            slot,
            signals,
        };
        let mut holds = self.holds.lock();
        let list = holds.entry(req.key.to_owned()).or_default();
        // A hold of this owner still listed is dead (else the grant would have nested).
        list.retain(|h| h.owner != req.owner && !h.cmd.is_closed());
        list.push(hold);
        drop(holds);
        tokio::spawn(keeper.run(anchored));
        Ok(Attempt::Acquired(Grant { fence: FencingToken(g.fence), lease: None, slot: None }))
    }

    /// Release `owner`'s hold of `key`: one nesting less, or the end of the hold on the server
    /// ([`SessionDriver::end`]), bounded as a ping is.
    ///
    /// # Errors
    /// The end failed (the connection is then closed), or went unanswered until the hold had
    /// to be given up (a temporary error; the hold is marked lost).
    pub async fn release(&self, key: &str, owner: OwnerToken) -> Result<bool> {
        let hold = {
            let mut holds = self.holds.lock();
            match find(&mut holds, key, owner) {
                Some(h) if h.count > 1 => {
                    h.count -= 1;
                    return Ok(true);
                }
                Some(_) => take(&mut holds, key, |h| h.owner == owner),
                None => None,
            }
        };
        let Some(Hold { cmd, slot, signals, .. }) = hold else { return Ok(false) };
        // Take the connection (after a ping or note in flight) while the keeper's channel is
        // still open: a keeper that sees it closed with the connection in place takes its
        // backend for dropped and ends the hold itself. If this future is dropped here, that is
        // what happens; dropped later, the connection is closed: the lock is freed.
        let live = slot.lock().await.take();
        let Some(Live { held, confirmed }) = live else { return Ok(false) }; // the keeper saw it die
        let mut link = Link::new(&signals, key, self.timing, &confirmed);
        let ended = link.send(self.driver.end(key, held, Ending::Release)).await;
        // The keeper ends only now: closing its channel wakes it, and on a hand-over that wake
        // (a cross-thread one, often) would delay the statement that frees the lock. Until
        // then it finds the connection taken, so a ping it starts meanwhile ends it quietly.
        drop(cmd);
        match ended {
            Some(Ok(released)) => Ok(released),
            Some(Err(e)) if self.driver.connection_lost(&e) => {
                each(&signals, |s| s.mark_lost(LostReason::SessionEnded));
                Ok(false)
            }
            Some(Err(e)) => Err(self.driver.classify(e)),
            None => {
                each(&signals, |s| s.mark_lost(LostReason::SessionEnded));
                Err(no_answer(self.driver.name(), "release"))
            }
        }
    }

    /// One flag per item: its hold is here and its connection answered a ping (through the
    /// keeper, so a renewal never overlaps another request on the connection).
    ///
    /// # Errors
    /// None: a failed ping is a lost hold (`false`).
    pub async fn renew(&self, items: &[RenewItem<'_>]) -> Result<Vec<bool>> {
        let pings = items.iter().map(|it| {
            let cmd = find(&mut self.holds.lock(), it.key, it.owner).map(|h| h.cmd.clone());
            async move {
                let Some(cmd) = cmd else { return false };
                let (tx, rx) = oneshot::channel();
                if cmd.send(Cmd::Ping(tx)).await.is_err() {
                    return false;
                }
                rx.await.unwrap_or(false)
            }
        });
        Ok(futures_util::future::join_all(pings).await)
    }

    /// Store `note` with `owner`'s hold of `key`, through its keeper (on the holding connection,
    /// after any ping or renewal queued before it). `Ok(false)` when `owner` does not hold `key`
    /// here. A dropped future leaves the request with the keeper, which completes it: the note
    /// is then stored with the hold, or nothing is.
    ///
    /// # Errors
    /// The server refused the note (the hold is untouched).
    pub async fn set_note(&self, key: &str, owner: OwnerToken, note: &str) -> Result<bool> {
        let cmd = {
            let mut holds = self.holds.lock();
            find(&mut holds, key, owner)
                .filter(|h| !h.cmd.is_closed() && !h.shared)
                .filter(|h| !h.signals.lock().iter().any(LeaseSignal::is_lost))
                .map(|h| h.cmd.clone())
        };
        let Some(cmd) = cmd else { return Ok(false) };
        let (tx, rx) = oneshot::channel();
        if cmd.send(Cmd::Note(note.to_owned(), tx)).await.is_err() {
            return Ok(false);
        }
        rx.await.unwrap_or(Ok(false))
    }
}
