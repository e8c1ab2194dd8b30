//! What the two session-bound modes (pessimistic and named) share: a lock that lives exactly as
//! long as one server session, on a connection taken out of the pool for the hold's life.
//!
//! [`Sessions`] keeps the holds of one backend: nesting of one owner (no round trip), a keeper
//! task per hold that pings its connection (the lost signal, `Uncertain` then `Lost`), renewal
//! as a ping, and release as one statement that ends the hold and gives the session its
//! server-wide timeouts back. [`Pinned`] closes a connection that was not ended cleanly, and
//! [`killable_wait`] ends a lock wait in the server with `KILL QUERY` when its future is dropped.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use lock_core::backend::{AcquireRequest, Attempt, Cleanup, Grant, Mutex, RenewItem};
use lock_core::{FencingToken, LeaseSignal, LostReason, OwnerToken, Result};
use sqlx::mysql::MySqlPool;
use sqlx::pool::PoolConnection;
use sqlx::{Connection, MySql};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::error::{classify, is_connection_lost};
use crate::trips::Trips;

/// How long past the caller's deadline the client waits for the server's own timeout of a lock
/// wait before it cancels the wait itself with `KILL QUERY`: long enough for a loaded server to
/// answer its own timeout, short enough that a caller's deadline stays honest.
pub(crate) const KILL_GRACE: Duration = Duration::from_millis(250);
/// Waits shorter than this are not sent to the server (a statement timeout of 0 means "no
/// limit"): the attempt answers "held".
pub(crate) const MIN_WAIT: Duration = Duration::from_millis(1);
/// Commands queued to one hold's keeper: a release and a renewal or two at most are ever in
/// flight, so senders never wait.
const KEEPER_QUEUE: usize = 4;

/// A pooled connection carrying (or about to carry) a session-bound lock. Unless the lock was
/// ended cleanly ([`Pinned::end`]), the connection is closed on drop instead of going back to
/// the pool: the server then ends the session and frees what it held.
///
/// Not a [`Cleanup`]: nothing is sent on drop (closing the socket is the undo, and it needs no
/// runtime), and the connection is in use until then, so no undo closure could own it.
pub(crate) struct Pinned {
    pub(crate) conn: PoolConnection<MySql>,
    dirty: bool,
}

impl Pinned {
    pub(crate) fn new(conn: PoolConnection<MySql>) -> Self {
        Pinned { conn, dirty: true }
    }

    /// End the hold with `stmt` (which also gives the session its server-wide timeouts back);
    /// on success the connection may go back to the pool.
    pub(crate) async fn end(
        mut self,
        stmt: &'static str,
        trips: &Trips,
    ) -> std::result::Result<(), sqlx::Error> {
        trips.add();
        sqlx::raw_sql(stmt).execute(&mut *self.conn).await?;
        self.dirty = false;
        Ok(())
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        if self.dirty {
            self.conn.close_on_drop();
        }
    }
}

/// End the lock wait running on connection `conn_id`. Our own user's threads may always be
/// killed; an "unknown thread" error just means the wait is over.
async fn kill_query(pool: MySqlPool, conn_id: u64, trips: Trips) -> Result<()> {
    trips.add();
    sqlx::query("KILL QUERY ?").bind(conn_id).execute(&pool).await.map(drop).map_err(classify)
}

/// Run `wait`, a lock wait on connection `conn_id` that the server ends by itself at `deadline`.
/// If this future is dropped mid-wait, the wait is killed (`KILL QUERY`) so it neither lingers
/// in the server's queue nor is granted to nobody (closing the connection would not end it: the
/// server does not read the socket while it waits); if the server has not answered
/// [`KILL_GRACE`] after the deadline, the wait is killed and its answer awaited.
pub(crate) async fn killable_wait<T>(
    pool: &MySqlPool,
    conn_id: u64,
    deadline: Instant,
    trips: &Trips,
    wait: impl Future<Output = T>,
) -> T {
    let (p, t) = (pool.clone(), trips.clone());
    let killer = Cleanup::arm("mysql lock wait", move || kill_query(p, conn_id, t));
    tokio::pin!(wait);
    let out = tokio::select! {
        r = &mut wait => r,
        _ = tokio::time::sleep_until(deadline + KILL_GRACE) => {
            tracing::debug!(conn_id, "server did not end the lock wait at the deadline; killing it");
            if let Err(e) = kill_query(pool.clone(), conn_id, trips.clone()).await {
                tracing::debug!(conn_id, error = %e, "KILL QUERY of a lock wait failed");
            }
            wait.await
        }
    };
    killer.disarm();
    out
}

/// The server-side idle bound for a keep-alive period: three periods, in whole seconds (the
/// unit of `wait_timeout`), at least 2 s. A holder that cannot reach the server for that long
/// has its session ended by the server; the client gives the hold up a drift margin earlier.
pub(crate) fn server_idle(keepalive: Duration) -> Duration {
    Duration::from_secs((keepalive * 3).as_secs_f64().ceil().max(2.0) as u64)
}

enum Cmd {
    /// Is the holding connection alive? (renew)
    Ping(oneshot::Sender<bool>),
    /// End the hold and hand the connection back.
    Release(oneshot::Sender<Result<bool>>),
}

struct Hold {
    id: u64,
    owner: OwnerToken,
    count: u32,
    fence: u64,
    #[cfg_attr(not(feature = "testing"), allow(dead_code))]
    conn_id: u64,
    cmd: mpsc::Sender<Cmd>,
    /// The lost signals of every acquisition of this hold (nested ones from another `Locker`
    /// arrive with their own).
    signals: Arc<Mutex<Vec<LeaseSignal>>>,
}

type Holds = Mutex<HashMap<String, Hold>>;

/// A granted session lock, ready to be recorded as a hold.
pub(crate) struct Granted {
    pub(crate) pinned: Pinned,
    /// `CONNECTION_ID()` of the holding session.
    pub(crate) conn_id: u64,
    pub(crate) fence: u64,
    /// Send time of the request whose answer granted the lock: the server's idle clock (its
    /// `wait_timeout`, counted from when it sent its last answer) started no earlier. After a
    /// wait in the server's queue too: the grant is the waiting statement's answer.
    pub(crate) confirmed: Instant,
    /// Granted after a wait in the server's queue: when the answer arrived. The keeper then
    /// counts from `confirmed` as usual, its first ping one keepalive after it, so a short wait
    /// costs no extra ping and a release right after the grant is not queued behind one. A
    /// wait that lasted a keepalive period or longer leaves too little of the bound after
    /// `confirmed`: the keeper then anchors at the answer's arrival and pings at once.
    pub(crate) answered: Option<Instant>,
}

/// The session-bound holds of one backend.
pub(crate) struct Sessions {
    keepalive: Duration,
    server_idle: Duration,
    /// Ends a hold cleanly (and restores the session's timeouts): at release.
    release: &'static str,
    /// Ends a hold whose backend was dropped.
    abandon: &'static str,
    holds: Arc<Holds>,
    next_id: AtomicU64,
    trips: Trips,
}

impl fmt::Debug for Sessions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sessions")
            .field("keepalive", &self.keepalive)
            .field("held", &self.holds.lock().len())
            .finish()
    }
}

impl Sessions {
    pub(crate) fn new(
        keepalive: Duration,
        release: &'static str,
        abandon: &'static str,
        trips: Trips,
    ) -> Self {
        Sessions {
            keepalive,
            server_idle: server_idle(keepalive),
            release,
            abandon,
            holds: Arc::default(),
            next_id: AtomicU64::new(0),
            trips,
        }
    }

    /// How long the server lets a holding session sit idle before it ends it: set on the
    /// session (`wait_timeout`) when the lock is taken.
    pub(crate) fn server_idle(&self) -> Duration {
        self.server_idle
    }

    /// Connection id (`CONNECTION_ID()`) of the connection holding `key`, if held here.
    #[cfg(feature = "testing")]
    pub(crate) fn held_connection_id(&self, key: &str) -> Option<u64> {
        self.holds.lock().get(key).filter(|h| !h.cmd.is_closed()).map(|h| h.conn_id)
    }

    /// A nested acquisition by the holder of `key`: the hold's fencing token, with no round
    /// trip (the hold stays one lock on the server).
    pub(crate) fn reenter(&self, key: &str, owner: OwnerToken, signal: &LeaseSignal) -> Option<u64> {
        let mut holds = self.holds.lock();
        let h = holds.get_mut(key).filter(|h| h.owner == owner && !h.cmd.is_closed())?;
        // A hold already known lost is gone on the server: never nest into it.
        if h.signals.lock().iter().any(LeaseSignal::is_lost) {
            return None;
        }
        h.count += 1;
        // A nesting through the same `Locker` carries the hold's own signal: keep each once.
        let mut signals = h.signals.lock();
        if !signals.iter().any(|s| s.same_as(signal)) {
            signals.push(signal.clone());
        }
        Some(h.fence)
    }

    /// Record a granted lock as the hold of `req.owner` and start its keeper.
    pub(crate) fn hold(&self, req: &AcquireRequest<'_>, g: Granted) -> Attempt {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::channel(KEEPER_QUEUE);
        let signals = Arc::new(Mutex::new(vec![req.signal.clone()]));
        let keeper = Keeper {
            pinned: g.pinned,
            rx,
            signals: signals.clone(),
            every: self.keepalive,
            confirmed: g.confirmed,
            answered: g.answered,
            server_idle: self.server_idle,
            release: self.release,
            abandon: self.abandon,
            holds: Arc::downgrade(&self.holds),
            trips: self.trips.clone(),
            key: req.key.to_owned(),
            id,
        };
        self.holds.lock().insert(
            req.key.to_owned(),
            Hold { id, owner: req.owner, count: 1, fence: g.fence, conn_id: g.conn_id, cmd: tx, signals },
        );
        tokio::spawn(keeper.run());
        Attempt::Acquired(Grant { fence: FencingToken(g.fence), lease: None })
    }

    pub(crate) async fn release(&self, key: &str, owner: OwnerToken) -> Result<bool> {
        let cmd = {
            let mut holds = self.holds.lock();
            match holds.get_mut(key) {
                Some(h) if h.owner == owner => {
                    if h.count > 1 {
                        h.count -= 1;
                        return Ok(true);
                    }
                    holds.remove(key).map(|h| h.cmd)
                }
                _ => None,
            }
        };
        let Some(cmd) = cmd else { return Ok(false) };
        let (tx, rx) = oneshot::channel();
        if cmd.send(Cmd::Release(tx)).await.is_err() {
            return Ok(false); // the keeper saw the connection die
        }
        rx.await.unwrap_or(Ok(false))
    }

    pub(crate) async fn renew(&self, items: &[RenewItem<'_>]) -> Result<Vec<bool>> {
        let pings = items.iter().map(|it| {
            let cmd = self.holds.lock().get(it.key).filter(|h| h.owner == it.owner).map(|h| h.cmd.clone());
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
}

fn each(signals: &Mutex<Vec<LeaseSignal>>, f: impl Fn(&LeaseSignal)) {
    signals.lock().iter().for_each(f);
}

/// Owns the holding connection for the lock's life: pings it (keep-alive and loss detection),
/// answers renewals, ends the hold on release, and when the backend is dropped.
///
/// Every ping is bounded: a ping unanswered after one keep-alive period makes the hold
/// `Uncertain`, and when nothing has been confirmed for the server's idle bound (counted from
/// when the last confirmed request was *sent*) less a drift margin, the hold is `Lost` and the
/// connection closed: by then the server may have ended the session and freed the lock.
struct Keeper {
    pinned: Pinned,
    rx: mpsc::Receiver<Cmd>,
    signals: Arc<Mutex<Vec<LeaseSignal>>>,
    every: Duration,
    /// Send time of the last request the server answered on this connection.
    confirmed: Instant,
    /// Granted after a wait in the server's queue: when the answer arrived ([`Granted::answered`]).
    answered: Option<Instant>,
    server_idle: Duration,
    release: &'static str,
    abandon: &'static str,
    holds: Weak<Holds>,
    key: String,
    id: u64,
    trips: Trips,
}

impl Keeper {
    fn each_signal(&self, f: impl Fn(&LeaseSignal)) {
        each(&self.signals, f);
    }

    /// When the hold must be given up without a confirmation: the server's idle bound from
    /// the last confirmed send, less the core's drift margin for that span.
    fn give_up_at(&self) -> Instant {
        let margin = lock_core::drift_margin(
            self.server_idle,
            lock_core::DRIFT_MARGIN_RATE,
            lock_core::DRIFT_MARGIN_FLOOR,
        );
        self.confirmed + self.server_idle.saturating_sub(margin)
    }

    /// One bounded ping: `true` when the server answered.
    async fn ping(&mut self) -> bool {
        let sent = Instant::now();
        let (give_up, uncertain_at) = (self.give_up_at(), sent + self.every);
        let mut uncertain = false;
        let signals = self.signals.clone();
        let key = self.key.clone();
        self.trips.add();
        let ping = self.pinned.conn.ping();
        let answered = {
            tokio::pin!(ping);
            loop {
                tokio::select! {
                    r = &mut ping => {
                        if let Err(e) = &r {
                            tracing::warn!(%key, error = %e, "connection holding a lock died");
                        }
                        break r.is_ok();
                    }
                    _ = tokio::time::sleep_until(uncertain_at), if !uncertain => {
                        uncertain = true;
                        each(&signals, LeaseSignal::mark_uncertain);
                    }
                    _ = tokio::time::sleep_until(give_up) => {
                        tracing::warn!(%key, "no answer from the server within its idle bound; the lock is given up");
                        break false;
                    }
                }
            }
        };
        if !answered {
            return false;
        }
        self.confirmed = sent;
        self.each_signal(LeaseSignal::mark_held);
        true
    }

    async fn run(mut self) {
        // The first ping is due one keepalive after the confirming send, as after any ping.
        // That send may be a wait's: the server could not have started the session's idle
        // clock before the request reached it, so counting from the send is safe however long
        // the server took to grant (the rule for every deadline here: from when the request was
        // sent, less the drift margin). A wait that outlasted a keepalive period would leave
        // too little of the bound: anchor at the answer's arrival then (the one-way delay must
        // stay under the drift margin) and re-anchor on a ping's send at once, as before.
        let mut next = self.confirmed + self.every;
        if let Some(answered) = self.answered.filter(|&a| a >= next) {
            self.confirmed = answered;
            next = Instant::now();
        }
        loop {
            tokio::select! {
                cmd = self.rx.recv() => match cmd {
                    Some(Cmd::Ping(reply)) => {
                        let alive = self.ping().await;
                        let _ = reply.send(alive);
                        if !alive {
                            return self.lost();
                        }
                        next = Instant::now() + self.every;
                    }
                    Some(Cmd::Release(reply)) => {
                        let signals = self.signals.clone();
                        let out = match self.pinned.end(self.release, &self.trips).await {
                            Ok(()) => Ok(true),
                            Err(e) if is_connection_lost(&e) => {
                                each(&signals, |s| s.mark_lost(LostReason::SessionEnded));
                                Ok(false)
                            }
                            Err(e) => Err(classify(e)),
                        };
                        let _ = reply.send(out);
                        return;
                    }
                    None => {
                        // The backend was dropped: end the hold, free the lock.
                        let _ = self.pinned.end(self.abandon, &self.trips).await;
                        return;
                    }
                },
                _ = tokio::time::sleep_until(next) => {
                    if !self.ping().await {
                        return self.lost();
                    }
                    next = Instant::now() + self.every;
                }
            }
        }
    }

    /// The connection died or went silent past the server's idle bound: the lock is (or will
    /// at once be) free for others. Every guard of the hold is told; the connection is closed,
    /// so a server that still holds the session ends it now.
    fn lost(self) {
        // Out of the table first: a guard woken by the signal may at once acquire again with
        // the same owner, and must not nest into this dead hold.
        if let Some(holds) = self.holds.upgrade() {
            let mut holds = holds.lock();
            if holds.get(&self.key).is_some_and(|h| h.id == self.id) {
                holds.remove(&self.key);
            }
        }
        self.each_signal(|s| s.mark_lost(LostReason::SessionEnded));
        // `pinned` drops dirty: the connection is closed, never pooled.
    }
}
