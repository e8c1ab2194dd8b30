//! What the two session-bound modes (pessimistic and named) share: a lock that lives exactly as
//! long as one server session, on a connection taken out of the pool for the hold's life.
//!
//! [`Sessions`] keeps the holds of one backend: nesting of one owner (no round trip), a keeper
//! task per hold that pings its connection (the lost signal, `Uncertain` then `Lost`), renewal
//! as a ping, and release as one statement that ends the hold (and, on a shared pool's
//! connection, gives the session its server-wide timeouts back). [`Pinned`] closes a connection that was not ended cleanly, and
//! [`killable_wait`] ends a lock wait in the server with `KILL QUERY` when its future is dropped.
//!
//! Notes on a hold ([`Sessions::set_note`]) are written by the keeper on the holding connection,
//! inside the transaction that lives exactly as long as the hold, and never committed: readers
//! ([`Sessions::note`]) see them with `READ UNCOMMITTED`, and every end of the hold rolls them
//! back before the key is free (`sql/notes_session_insert.sql`).

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use lock_core::backend::{
    AcquireRequest, Attempt, Cleanup, DropInRuntime, Grant, Mutex, RenewItem, session_give_up,
    waited_grant_anchor,
};
use lock_core::{FencingToken, LeaseSignal, LockError, LostReason, OwnerToken, Result};
use sqlx::mysql::MySqlPool;
use sqlx::pool::PoolConnection;
use sqlx::{AssertSqlSafe, Connection, MySql, Row};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::error::{NAME, classify, is_connection_lost, is_refused};
use crate::sql::{NoteKind, hex_literal};
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
    pub(crate) conn: DropInRuntime<PoolConnection<MySql>>,
    dirty: bool,
    /// When the statement that ended the last hold was sent ([`Pinned::end`]): the server's idle
    /// clock on the session started no earlier.
    ended: Instant,
}

impl Pinned {
    pub(crate) fn new(conn: PoolConnection<MySql>) -> Self {
        Pinned { conn: DropInRuntime::new(conn), dirty: true, ended: Instant::now() }
    }

    /// End the hold with `stmt` (which, on a shared pool's connection, also gives the session
    /// its server-wide timeouts back); on success the connection is clean: dropped, it goes
    /// back to the pool, or it may be kept for the next hold ([`Warm`]).
    pub(crate) async fn end(
        mut self,
        stmt: &'static str,
        trips: &Trips,
    ) -> std::result::Result<Pinned, sqlx::Error> {
        trips.add();
        let sent = Instant::now();
        sqlx::raw_sql(stmt).execute(&mut **self.conn).await?;
        self.dirty = false;
        self.ended = sent;
        Ok(self)
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        if self.dirty {
            self.conn.close_on_drop();
        }
    }
}

/// Clean holding connections kept for the next acquisition (pessimistic mode, whose holding
/// connections come from a private pool and carry the holder's session settings): taking one
/// skips the pool's checkout, and keeping it skips the ping sqlx sends on every return to a pool
/// (a round trip per release, ~30 µs of a pair on a loaded machine). A connection is only taken
/// while its session is far from the server's idle bound (`fresh`, counted from when its last
/// statement was sent); a sweeper hands older ones back to the pool (whose return ping restarts
/// the server's idle clock, or finds the session gone and closes the connection).
pub(crate) struct Warm {
    conns: Mutex<Vec<Pinned>>,
    fresh: Duration,
}

/// Clean connections kept at most: enough for a few clients taking turns; more go back to the pool.
const WARM_MAX: usize = 4;

impl Warm {
    /// Keep connections for `fresh` after their last statement's send, swept every half of that
    /// (the sweeper ends with the last reference). Needs a runtime.
    pub(crate) fn new(fresh: Duration) -> Arc<Self> {
        let warm = Arc::new(Warm { conns: Mutex::new(Vec::new()), fresh });
        let weak = Arc::downgrade(&warm);
        let every = (fresh / 2).max(Duration::from_millis(10));
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let Some(warm) = weak.upgrade() else { return };
                drop(warm.stale());
            }
        });
        warm
    }

    /// The connections past `fresh`, out of the stack (dropped outside its lock).
    fn stale(&self) -> Vec<Pinned> {
        let now = Instant::now();
        let mut conns = self.conns.lock();
        let (old, keep): (Vec<_>, Vec<_>) = conns.drain(..).partition(|p| p.ended + self.fresh <= now);
        *conns = keep;
        old
    }

    /// The most recently used fresh connection, now carrying (or about to carry) a hold.
    pub(crate) fn take(&self) -> Option<Pinned> {
        let now = Instant::now();
        let mut p = loop {
            let p = self.conns.lock().pop()?;
            if p.ended + self.fresh > now {
                break p;
            }
            // Older ones are below it on the stack: the sweeper's.
            drop(p);
        };
        p.dirty = true;
        Some(p)
    }

    /// Keep `p`, a connection whose hold ended cleanly, for the next acquisition.
    pub(crate) fn put(&self, p: Pinned) {
        if p.dirty {
            return;
        }
        let mut conns = self.conns.lock();
        if conns.len() < WARM_MAX {
            conns.push(p);
        }
    }
}

/// End the lock wait running on connection `conn_id`. Our own user's threads may always be
/// killed; an "unknown thread" error just means the wait is over. Bounded: a wait the kill does
/// not reach in time still ends, with the server's own timeout or with its closed session.
async fn kill_query(pool: MySqlPool, conn_id: u64, trips: Trips) -> Result<()> {
    trips.add();
    let kill = sqlx::query("KILL QUERY ?").bind(conn_id).execute(&pool);
    answered_by(Instant::now() + KILL_BOUND, kill).await.map(drop)
}

/// How long a `KILL QUERY` may take, its pool checkout included.
const KILL_BOUND: Duration = Duration::from_secs(2);

/// `fut`, requests to the server, answered by `bound`: a server that has not answered by then
/// (paused, partitioned) is a temporary error, and the future is dropped, which closes any
/// connection it had pinned (and kills its lock wait, `killable_wait`), as for any attempt
/// dropped by its caller.
pub(crate) async fn answered_by<T>(
    bound: Instant,
    fut: impl Future<Output = std::result::Result<T, sqlx::Error>>,
) -> Result<T> {
    by(bound, async { fut.await.map_err(classify) }).await
}

/// As [`answered_by`], for a future that classifies its own errors.
async fn by<T>(bound: Instant, fut: impl Future<Output = Result<T>>) -> Result<T> {
    tokio::time::timeout_at(bound, fut).await.unwrap_or_else(|_| Err(no_answer()))
}

pub(crate) fn no_answer() -> LockError {
    LockError::temporary(NAME, "no answer from the server in time")
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
    /// Store a note with the hold.
    Note(String, oneshot::Sender<Result<bool>>),
}

/// How a session mode keeps notes on its holds (`sql/notes_session_*.sql`).
#[derive(Debug)]
pub(crate) struct SessionNotes {
    pub(crate) kind: NoteKind,
    pub(crate) insert: Arc<str>,
    pub(crate) update: Arc<str>,
    /// Template with `{key}` still to fill.
    pub(crate) read: Arc<str>,
    /// Opens the transaction the notes live in (named mode; a pessimistic hold is one).
    pub(crate) begin: Option<Arc<str>>,
    /// Ends a hold whose transaction carries a note: `ROLLBACK` first (the note goes before the
    /// key is free), then the hold, with the session's timeouts restored. At release and abandon.
    pub(crate) end: &'static str,
}

/// What storing a note came to.
enum Noted {
    Stored,
    /// The server refused the statement before running it (no notes table, no privilege):
    /// the hold is untouched.
    Refused(LockError),
    /// The connection died, went silent, or the statement failed in a way that may have ended
    /// the holding transaction: the hold is given up.
    Lost,
    /// The hold was released meanwhile.
    Gone,
}

/// The connection of one hold, shared by its keeper (pings, notes) and its release, which takes
/// it out and ends the hold in the releasing task: a release through the keeper task cost two
/// task hand-overs (~17 µs of a ~290 µs pair on a quiet machine, ~40 µs on a loaded one).
/// `None` once taken, by the release or by the keeper when the hold is lost.
struct Held {
    pinned: Pinned,
    /// A transaction was opened for notes (named mode).
    in_tx: bool,
    /// The holding transaction carries a note row: the hold ends with `notes.end`.
    noted: bool,
}

type Slot = Arc<tokio::sync::Mutex<Option<Held>>>;

impl Held {
    /// The statement that ends this hold: `normal` (release or abandon), or the notes' end when
    /// the session has a transaction of notes to roll back first.
    fn ending(&self, notes: &SessionNotes, normal: &'static str) -> &'static str {
        if self.noted || self.in_tx { notes.end } else { normal }
    }
}

struct Hold {
    id: u64,
    owner: OwnerToken,
    count: u32,
    fence: u64,
    #[cfg_attr(not(feature = "testing"), allow(dead_code))]
    conn_id: u64,
    cmd: mpsc::Sender<Cmd>,
    slot: Slot,
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
    /// Granted after a wait in the server's queue: when the answer arrived. A wait answered
    /// within a keep-alive period counts from `confirmed` (no extra ping, so a release right
    /// after the grant is not queued behind one); a longer one is confirmed by a ping before
    /// it is handed out (`lock_core::backend::waited_grant_anchor`).
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
    notes: Arc<SessionNotes>,
    holds: Arc<Holds>,
    next_id: AtomicU64,
    trips: Trips,
    /// Where a cleanly released connection is kept for the next hold (pessimistic mode).
    warm: Option<Arc<Warm>>,
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
        notes: SessionNotes,
        trips: Trips,
    ) -> Self {
        Sessions {
            keepalive,
            server_idle: server_idle(keepalive),
            release,
            abandon,
            notes: Arc::new(notes),
            holds: Arc::default(),
            next_id: AtomicU64::new(0),
            trips,
            warm: None,
        }
    }

    /// Run `attempt`, bounded: by its caller's deadline plus room for the server's own timeout
    /// and the `KILL QUERY` after it (`killable_wait`), past which it is "held" (the caller's
    /// timeout); or without a deadline, by the pool's `checkout` timeout (waiting for a
    /// connection under load is no silence of the server) plus the server's idle bound (a server
    /// silent that long is treated as gone by the keepers too), past which it is a temporary
    /// error. Cut off, the attempt is dropped as a cancelled one is: its connection closed, its
    /// wait killed.
    pub(crate) async fn bounded_attempt(
        &self,
        wait_until: Option<Instant>,
        checkout: Duration,
        attempt: impl Future<Output = Result<Attempt>>,
    ) -> Result<Attempt> {
        let Some(deadline) = wait_until else {
            return by(self.response_bound() + checkout, attempt).await;
        };
        match tokio::time::timeout_at(deadline + KILL_GRACE * 4, attempt).await {
            Ok(answer) => answer,
            Err(_) => Ok(Attempt::Held { retry_after: None }),
        }
    }

    /// When a single request sent now must have answered: the server's idle bound.
    pub(crate) fn response_bound(&self) -> Instant {
        Instant::now() + self.server_idle
    }

    /// Keep cleanly released connections in `warm` instead of returning them to their pool.
    pub(crate) fn with_warm(mut self, warm: Arc<Warm>) -> Self {
        self.warm = Some(warm);
        self
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

    /// Record a granted lock as the hold of `req.owner` and start its keeper; a grant after a
    /// long wait is first confirmed by a ping (no answer: an error, and the connection closes
    /// with `g`, taking the lock with the session).
    pub(crate) async fn hold(&self, req: &AcquireRequest<'_>, mut g: Granted) -> Result<Attempt> {
        let anchor = g
            .answered
            .map_or(Some(g.confirmed), |arrived| waited_grant_anchor(g.confirmed, arrived, self.keepalive));
        let confirmed = match anchor {
            Some(sent) => sent,
            None => {
                let sent = Instant::now();
                self.trips.add();
                answered_by(session_give_up(sent, self.server_idle), g.pinned.conn.ping()).await?;
                sent
            }
        };
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::channel(KEEPER_QUEUE);
        let signals = Arc::new(Mutex::new(vec![req.signal.clone()]));
        let slot: Slot =
            Arc::new(tokio::sync::Mutex::new(Some(Held { pinned: g.pinned, in_tx: false, noted: false })));
        let keeper = Keeper {
            slot: slot.clone(),
            rx,
            signals: signals.clone(),
            every: self.keepalive,
            confirmed,
            server_idle: self.server_idle,
            abandon: self.abandon,
            notes: self.notes.clone(),
            holds: Arc::downgrade(&self.holds),
            trips: self.trips.clone(),
            key: req.key.to_owned(),
            id,
        };
        self.holds.lock().insert(
            req.key.to_owned(),
            Hold {
                id,
                owner: req.owner,
                count: 1,
                fence: g.fence,
                conn_id: g.conn_id,
                cmd: tx,
                slot,
                signals,
            },
        );
        tokio::spawn(keeper.run());
        Ok(Attempt::Acquired(Grant { fence: FencingToken(g.fence), lease: None }))
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
                    holds.remove(key)
                }
                _ => None,
            }
        };
        let Some(Hold { cmd, slot, signals, .. }) = cmd else { return Ok(false) };
        // Take the connection (after a ping or note in flight) while the keeper's channel is
        // still open: a keeper that sees it closed with the connection in place takes its
        // backend for dropped and rolls the hold back. If this future is dropped here, that is
        // what happens; dropped later, the connection is closed (`Pinned`): the lock is freed.
        let held = slot.lock().await.take();
        drop(cmd);
        let Some(held) = held else { return Ok(false) }; // the keeper saw the connection die
        let end = held.ending(&self.notes, self.release);
        // Bounded by the server's idle bound: without an answer by then the connection is
        // closed (dropped with the statement), and the server frees the lock as it ends the
        // session.
        let ended = held.pinned.end(end, &self.trips);
        match tokio::time::timeout(self.server_idle, ended).await {
            Ok(Ok(clean)) => {
                if let Some(warm) = &self.warm {
                    warm.put(clean);
                }
                Ok(true)
            }
            Ok(Err(e)) if is_connection_lost(&e) => {
                each(&signals, |s| s.mark_lost(LostReason::SessionEnded));
                Ok(false)
            }
            Ok(Err(e)) => Err(classify(e)),
            Err(_) => {
                each(&signals, |s| s.mark_lost(LostReason::SessionEnded));
                Err(no_answer())
            }
        }
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

    /// Store `note` with `owner`'s hold of `key`, through its keeper (on the holding connection,
    /// after any ping or renewal queued before it). `Ok(false)` when `owner` does not hold `key`
    /// here. A dropped future leaves the request with the keeper, which completes it: the note
    /// is then stored with the hold, or nothing is.
    pub(crate) async fn set_note(&self, key: &str, owner: OwnerToken, note: &str) -> Result<bool> {
        let cmd = {
            let holds = self.holds.lock();
            holds
                .get(key)
                .filter(|h| h.owner == owner && !h.cmd.is_closed())
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

    /// The note of `key`'s current holder, read uncommitted on a pooled connection: only a live
    /// hold's transaction carries one. One round trip.
    pub(crate) async fn note(&self, pool: &MySqlPool, key: &str) -> Result<Option<String>> {
        let read = self.notes.read.replace("{key}", &hex_literal(key.as_bytes()));
        self.trips.add();
        let read = sqlx::raw_sql(AssertSqlSafe(read)).fetch_all(pool);
        let rows = answered_by(self.response_bound(), read).await?;
        note_of(rows.first())
    }
}

/// The note in the first column of `row`, if there is a row.
pub(crate) fn note_of(row: Option<&sqlx::mysql::MySqlRow>) -> Result<Option<String>> {
    let Some(row) = row else { return Ok(None) };
    let bytes: Vec<u8> = row.try_get(0).map_err(classify)?;
    String::from_utf8(bytes).map(Some).map_err(|_| LockError::permanent(NAME, "a stored note is not UTF-8"))
}

/// Await `fut`, a request on a holding connection sent at `sent`, as a keeper awaits a ping:
/// every guard of the hold is told `Uncertain` after one keep-alive period without an answer,
/// and at `give_up` the request is abandoned (`None`).
async fn bounded<T>(
    signals: &Mutex<Vec<LeaseSignal>>,
    key: &str,
    uncertain_at: Instant,
    give_up: Instant,
    fut: impl Future<Output = std::result::Result<T, sqlx::Error>>,
) -> Option<std::result::Result<T, sqlx::Error>> {
    tokio::pin!(fut);
    let mut uncertain = false;
    loop {
        tokio::select! {
            r = &mut fut => return Some(r),
            _ = tokio::time::sleep_until(uncertain_at), if !uncertain => {
                uncertain = true;
                each(signals, LeaseSignal::mark_uncertain);
            }
            _ = tokio::time::sleep_until(give_up) => {
                tracing::warn!(%key, "no answer from the server within its idle bound; the lock is given up");
                return None;
            }
        }
    }
}

fn each(signals: &Mutex<Vec<LeaseSignal>>, f: impl Fn(&LeaseSignal)) {
    signals.lock().iter().for_each(f);
}

/// Keeps the holding connection for the lock's life (shared with the release, which takes it
/// out, [`Held`]): pings it (keep-alive and loss detection), answers renewals, stores notes, and
/// ends the hold when the backend is dropped.
///
/// Every ping is bounded: a ping unanswered after one keep-alive period makes the hold
/// `Uncertain`, and when nothing has been confirmed for the server's idle bound (counted from
/// when the last confirmed request was *sent*) less a drift margin, the hold is `Lost` and the
/// connection closed: by then the server may have ended the session and freed the lock.
struct Keeper {
    slot: Slot,
    rx: mpsc::Receiver<Cmd>,
    signals: Arc<Mutex<Vec<LeaseSignal>>>,
    every: Duration,
    /// Send time of the last request the server answered on this connection.
    confirmed: Instant,
    server_idle: Duration,
    abandon: &'static str,
    notes: Arc<SessionNotes>,
    holds: Weak<Holds>,
    key: String,
    id: u64,
    trips: Trips,
}

impl Keeper {
    fn each_signal(&self, f: impl Fn(&LeaseSignal)) {
        each(&self.signals, f);
    }

    /// When the hold must be given up without a confirmation.
    fn give_up_at(&self) -> Instant {
        session_give_up(self.confirmed, self.server_idle)
    }

    /// One bounded ping: `Some(true)` when the server answered, `None` when the hold was
    /// released meanwhile (its connection taken).
    async fn ping(&mut self) -> Option<bool> {
        let slot = self.slot.clone();
        let mut guard = slot.lock().await;
        let held = guard.as_mut()?;
        let sent = Instant::now();
        let (give_up, uncertain_at) = (self.give_up_at(), sent + self.every);
        let (signals, key) = (self.signals.clone(), self.key.clone());
        self.trips.add();
        match bounded(&signals, &key, uncertain_at, give_up, held.pinned.conn.ping()).await {
            Some(Ok(())) => {}
            Some(Err(e)) => {
                tracing::warn!(%key, error = %e, "connection holding a lock died");
                self.lost(&mut guard);
                return Some(false);
            }
            None => {
                self.lost(&mut guard);
                return Some(false);
            }
        }
        self.confirmed = sent;
        self.each_signal(LeaseSignal::mark_held);
        Some(true)
    }

    /// Store `note` in the holding transaction (opening one first in named mode), bounded as a
    /// ping is. An answer confirms the session as a ping's does.
    async fn note(&mut self, note: &str) -> Noted {
        let slot = self.slot.clone();
        let mut guard = slot.lock().await;
        let Some(held) = guard.as_mut() else { return Noted::Gone };
        let noted = self.note_on(held, note).await;
        if let Noted::Lost = noted {
            self.lost(&mut guard);
        }
        noted
    }

    /// [`Keeper::note`] on the hold's connection.
    async fn note_on(&mut self, held: &mut Held, note: &str) -> Noted {
        let (signals, key, notes) = (self.signals.clone(), self.key.clone(), self.notes.clone());
        if !held.in_tx
            && let Some(begin) = &notes.begin
        {
            let sent = Instant::now();
            let (uncertain_at, give_up) = (sent + self.every, self.give_up_at());
            self.trips.add();
            let begun = sqlx::raw_sql(AssertSqlSafe(begin.clone())).execute(&mut **held.pinned.conn);
            let answer = bounded(&signals, &key, uncertain_at, give_up, begun).await;
            if let Err(outcome) = self.answered(answer, sent) {
                return outcome;
            }
            held.in_tx = true;
        }
        let sent = Instant::now();
        let (uncertain_at, give_up) = (sent + self.every, self.give_up_at());
        let kind = notes.kind as u8;
        let stmt = if held.noted {
            sqlx::query(AssertSqlSafe(notes.update.clone()))
                .bind(note.as_bytes())
                .bind(key.as_bytes())
                .bind(kind)
        } else {
            sqlx::query(AssertSqlSafe(notes.insert.clone()))
                .bind(key.as_bytes())
                .bind(kind)
                .bind(note.as_bytes())
        };
        self.trips.add();
        let written = stmt.execute(&mut **held.pinned.conn);
        let answer = bounded(&signals, &key, uncertain_at, give_up, written).await;
        match self.answered(answer, sent) {
            Ok(_) => {
                held.noted = true;
                Noted::Stored
            }
            Err(outcome) => outcome,
        }
    }

    /// A note statement's answer: a refusal before running leaves the transaction as it was;
    /// any other failure may have ended it (a deadlock or a lock-wait timeout can roll the whole
    /// transaction back, and the row lock with it), so the hold is given up.
    fn answered<T>(
        &mut self,
        answer: Option<std::result::Result<T, sqlx::Error>>,
        sent: Instant,
    ) -> std::result::Result<T, Noted> {
        match answer {
            Some(Ok(v)) => {
                self.confirmed = sent;
                self.each_signal(LeaseSignal::mark_held);
                Ok(v)
            }
            Some(Err(e)) if is_refused(&e) => {
                self.confirmed = sent;
                self.each_signal(LeaseSignal::mark_held);
                Err(Noted::Refused(classify(e)))
            }
            Some(Err(e)) => {
                tracing::warn!(key = %self.key, error = %e, "note on a held lock failed; the lock is given up");
                Err(Noted::Lost)
            }
            None => Err(Noted::Lost),
        }
    }

    async fn run(mut self) {
        // The first ping is due one keepalive after the confirming send, as after any ping.
        let mut next = self.confirmed + self.every;
        loop {
            tokio::select! {
                cmd = self.rx.recv() => match cmd {
                    Some(Cmd::Ping(reply)) => {
                        let alive = self.ping().await;
                        let _ = reply.send(alive == Some(true));
                        match alive {
                            Some(true) => next = Instant::now() + self.every,
                            Some(false) | None => return,
                        }
                    }
                    Some(Cmd::Note(note, reply)) => match self.note(&note).await {
                        Noted::Stored => {
                            let _ = reply.send(Ok(true));
                            next = Instant::now() + self.every;
                        }
                        Noted::Refused(e) => {
                            let _ = reply.send(Err(e));
                            next = Instant::now() + self.every;
                        }
                        Noted::Lost => {
                            let _ = reply.send(Ok(false));
                            return;
                        }
                        Noted::Gone => {
                            let _ = reply.send(Ok(false));
                            return;
                        }
                    },
                    None => {
                        // Every sender is gone: released (the connection was taken first), or
                        // the backend was dropped: then end the hold, free the lock.
                        let held = self.slot.lock().await.take();
                        if let Some(held) = held {
                            let end = held.ending(&self.notes, self.abandon);
                            // Unanswered within the idle bound, the connection is closed.
                            let ended = held.pinned.end(end, &self.trips);
                            let _ = tokio::time::timeout(self.server_idle, ended).await;
                        }
                        return;
                    }
                },
                _ = tokio::time::sleep_until(next) => match self.ping().await {
                    Some(true) => next = Instant::now() + self.every,
                    Some(false) | None => return,
                },
            }
        }
    }

    /// The connection died or went silent past the server's idle bound: the lock is (or will
    /// at once be) free for others. Every guard of the hold is told; the connection is closed,
    /// so a server that still holds the session ends it now.
    ///
    /// Under the slot's lock (`guard`), so that a release waiting for it finds the connection
    /// gone and answers `false` rather than committing on it.
    fn lost(&self, guard: &mut Option<Held>) {
        // Out of the table first: a guard woken by the signal may at once acquire again with
        // the same owner, and must not nest into this dead hold.
        if let Some(holds) = self.holds.upgrade() {
            let mut holds = holds.lock();
            if holds.get(&self.key).is_some_and(|h| h.id == self.id) {
                holds.remove(&self.key);
            }
        }
        self.each_signal(|s| s.mark_lost(LostReason::SessionEnded));
        // Then the connection drops dirty: it is closed, never pooled.
        drop(guard.take());
    }
}
