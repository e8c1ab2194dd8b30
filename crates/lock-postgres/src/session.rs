//! The recipe: a lock is a session-level advisory lock held by a connection taken out of the
//! pool for the hold's life. A keeper task per hold pings that connection (the keep-alive and
//! the loss detector), answers renewals, stores notes and unlocks on release.
//!
//! A note is stored in the name's fence row with the hold's fence and backend pid
//! (`sql/notes_set.sql`), and read back only while that pid holds the advisory key and the
//! name's fence is still that hold's (`sql/notes_read.sql`).

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use lock_core::backend::{
    AcquireRequest, Attempt, Cleanup, DropInRuntime, Grant, LockInfo, Mutex, RenewItem, session_give_up,
    waited_grant_anchor,
};
use lock_core::{FencingToken, LeaseSignal, LockError, LostReason, OwnerToken, Result};
use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgPool, PgRow};
use sqlx::{AssertSqlSafe, Connection, Postgres, Row};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::error::{NAME, classify, is_connection_lost, is_contention};
use crate::key::{advisory_key, lock_ids};
use crate::trips::Trips;

/// How long past the caller's deadline the client waits for the server's own `lock_timeout`
/// before it cancels the wait itself with `pg_cancel_backend`: long enough for a loaded server
/// to answer its own timeout, short enough that a caller's deadline stays honest.
const CANCEL_GRACE: Duration = Duration::from_millis(250);
/// Waits shorter than this are sent as a plain try (a `lock_timeout` of 0 means "no limit").
const MIN_WAIT: Duration = Duration::from_millis(1);
/// Commands queued to one hold's keeper: a release and a renewal or two at most are ever in
/// flight, so senders never wait.
const KEEPER_QUEUE: usize = 4;
/// Shortest server-side idle bound: below it a scheduling stall of a loaded client (its task
/// inside the critical section, its keeper not yet run) lets the server end a hold that the
/// client still uses. The same floor as lock-mysql's `wait_timeout`.
const MIN_SERVER_IDLE: Duration = Duration::from_secs(2);

/// The statements, with the validated table name filled in.
#[derive(Debug)]
pub(crate) struct Sql {
    pub(crate) schema: String,
    /// The note columns for a fence table of an older version.
    pub(crate) notes_schema: String,
    try_lock: String,
    lock_wait: String,
    inspect: String,
    notes_read: String,
    /// Shared with the keepers.
    notes_set: Arc<str>,
    unlock_noted: Arc<str>,
}

impl Sql {
    pub(crate) fn new(table: &str) -> Self {
        let render = |s: &str| s.replace("{table}", table);
        Sql {
            schema: render(include_str!("../sql/schema.sql")),
            try_lock: render(include_str!("../sql/try_lock.sql")),
            lock_wait: render(include_str!("../sql/lock_wait.sql")),
            inspect: render(include_str!("../sql/inspect.sql")),
            notes_schema: render(include_str!("../sql/notes_schema.sql")),
            notes_read: render(include_str!("../sql/notes_read.sql")),
            notes_set: render(include_str!("../sql/notes_set.sql")).into(),
            unlock_noted: render(include_str!("../sql/unlock_noted.sql")).into(),
        }
    }
}

/// A pooled connection that may carry a session lock. Unless it was released cleanly, it is
/// closed on drop instead of going back to the pool: the server then ends the session, and
/// with it every advisory lock and any wait the session still had.
///
/// Not a [`Cleanup`]: nothing is sent on drop (closing the socket is the undo, and it needs
/// no runtime), and the connection is in use until then, so no undo closure could own it.
struct Pinned {
    conn: DropInRuntime<PoolConnection<Postgres>>,
    dirty: bool,
}

impl Pinned {
    fn new(conn: PoolConnection<Postgres>) -> Self {
        Pinned { conn: DropInRuntime::new(conn), dirty: true }
    }

    /// Nothing of ours is left on the session: it may go back to the pool.
    fn clean(mut self) {
        self.dirty = false;
    }

    /// `pg_advisory_unlock` and the session's idle bound restored; `Ok(true)` when the session
    /// held the lock (then the connection may go back to the pool). With `noted` (the statement
    /// and the lock name), the hold's note is cleared in the same statement.
    async fn unlock(
        mut self,
        key: i64,
        idle_before: &str,
        noted: Option<(&Arc<str>, &[u8])>,
        trips: &Trips,
    ) -> std::result::Result<bool, sqlx::Error> {
        trips.add();
        let query = match noted {
            None => sqlx::query(include_str!("../sql/unlock.sql")).bind(key).bind(idle_before),
            Some((stmt, name)) => {
                sqlx::query(AssertSqlSafe(stmt.clone())).bind(key).bind(idle_before).bind(name.to_vec())
            }
        };
        let row = query.fetch_one(&mut **self.conn).await?;
        let released: bool = row.try_get(0)?;
        if released {
            self.clean();
        }
        Ok(released)
    }
}

impl Pinned {
    /// After a lock wait that failed: a 55P03 or 57014 may have ended the statement after
    /// `pg_advisory_lock` granted the key (the fence write waited for a locked row or table), and
    /// the grant outlives the statement. Undo it, bounded; the connection is clean only when the
    /// server answered, else it is closed on drop.
    async fn unlock_stray(mut self, key: i64, trips: &Trips) {
        let (classid, objid) = lock_ids(key);
        trips.add();
        let undo = sqlx::query(include_str!("../sql/unlock_stray.sql"))
            .bind(key)
            .bind(classid)
            .bind(objid)
            .fetch_optional(&mut **self.conn);
        match tokio::time::timeout(CANCEL_GRACE, undo).await {
            Ok(Ok(undone)) => {
                if undone.is_some() {
                    tracing::debug!(key, "a failed lock wait had been granted; unlocked");
                }
                self.clean();
            }
            Ok(Err(e)) => tracing::debug!(key, error = %e, "checking a failed lock wait's session failed"),
            Err(_) => tracing::debug!(key, "no answer checking a failed lock wait's session"),
        }
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        if self.dirty {
            self.conn.close_on_drop();
        }
    }
}

/// `fut`, a request to the server, answered by `bound`: a server that has not answered by then
/// (paused, partitioned) is a temporary error, and the request's connection is dropped with the
/// future (closed, unless it was clean).
async fn answered_by<T>(
    what: &'static str,
    bound: Instant,
    fut: impl std::future::Future<Output = std::result::Result<T, sqlx::Error>>,
) -> Result<T> {
    match tokio::time::timeout_at(bound, fut).await {
        Ok(r) => r.map_err(classify),
        Err(_) => Err(no_answer(what)),
    }
}

/// `what` (a request) went unanswered within its bound.
fn no_answer(what: &str) -> LockError {
    LockError::temporary(NAME, format!("no answer from the server in time ({what})"))
}

/// End the lock wait of backend `pid` from another pooled connection. Bounded: a wait the
/// cancel does not reach in time still ends, with `lock_timeout` or with its closed session.
async fn cancel_backend(pool: PgPool, pid: i32, trips: Trips) -> Result<()> {
    trips.add();
    let cancel = sqlx::query(include_str!("../sql/cancel.sql")).bind(pid).execute(&pool);
    answered_by("pg_cancel_backend", Instant::now() + CANCEL_BOUND, cancel).await.map(drop)
}

/// How long a `pg_cancel_backend` may take, its pool checkout included.
const CANCEL_BOUND: Duration = Duration::from_secs(2);

enum Cmd {
    /// Is the holding connection alive? (renew)
    Ping(oneshot::Sender<bool>),
    /// Unlock and hand the connection back.
    Release(oneshot::Sender<Result<bool>>),
    /// Store a note with the hold.
    Note(String, oneshot::Sender<Result<bool>>),
}

struct Hold {
    id: u64,
    owner: OwnerToken,
    count: u32,
    fence: i64,
    #[cfg_attr(not(feature = "testing"), allow(dead_code))]
    pid: i32,
    cmd: mpsc::Sender<Cmd>,
    /// The lost signals of every acquisition of this hold (nested ones from another `Locker`
    /// arrive with their own).
    signals: Arc<Mutex<Vec<LeaseSignal>>>,
}

type Holds = Mutex<HashMap<String, Hold>>;

/// A granted lock on its connection, before the hold is recorded.
struct Locked {
    pinned: Pinned,
    fence: i64,
    pid: i32,
    /// The send time of the request the server answered last: its idle clock started no
    /// earlier (see `lock_core::backend::waited_grant_anchor` for a grant after a wait).
    confirmed: Instant,
    /// The session's `idle_session_timeout` before the grant set it.
    idle_before: String,
}

/// The backend state: the pool, the statements and the holds of this backend.
pub(crate) struct Sessions {
    pool: PgPool,
    sql: Sql,
    keepalive: Duration,
    /// `idle_session_timeout` of a holding session: the server ends a holder silent this long.
    server_idle: Duration,
    /// `server_idle` as the setting's text, such as `'300ms'`.
    server_idle_text: String,
    holds: Arc<Holds>,
    next_id: AtomicU64,
    trips: Trips,
}

/// The server-side idle bound for a keep-alive period: three periods, at least 2 s. A
/// holder that cannot reach the server for that long has its session ended by the server;
/// the client gives the hold up a drift margin earlier.
fn server_idle(keepalive: Duration) -> Duration {
    (keepalive * 3).max(MIN_SERVER_IDLE)
}

/// A duration as a `lock_timeout` / `idle_session_timeout` value, in whole milliseconds
/// (rounded up, at least 1: 0 would mean "no limit").
fn pg_millis(d: Duration) -> String {
    format!("{}ms", lock_core::backend::millis(d).min(i32::MAX as u64))
}

impl fmt::Debug for Sessions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sessions")
            .field("keepalive", &self.keepalive)
            .field("server_idle", &self.server_idle)
            .field("held", &self.holds.lock().len())
            .finish()
    }
}

impl Sessions {
    pub(crate) fn new(pool: PgPool, sql: Sql, keepalive: Duration) -> Self {
        let server_idle = server_idle(keepalive);
        Sessions {
            pool,
            sql,
            keepalive,
            server_idle,
            server_idle_text: pg_millis(server_idle),
            holds: Arc::default(),
            next_id: AtomicU64::new(0),
            trips: Trips::default(),
        }
    }

    pub(crate) fn sql(&self) -> &Sql {
        &self.sql
    }

    #[cfg(feature = "testing")]
    pub(crate) fn trips(&self) -> &Trips {
        &self.trips
    }

    /// The backend pid of the connection holding `key`, if held here.
    #[cfg(feature = "testing")]
    pub(crate) fn held_backend_pid(&self, key: &str) -> Option<i32> {
        self.holds.lock().get(key).filter(|h| !h.cmd.is_closed()).map(|h| h.pid)
    }

    pub(crate) async fn try_acquire(&self, req: &AcquireRequest<'_>) -> Result<Attempt> {
        if let Some(fence) = self.reenter(req.key, req.owner, req.signal) {
            return Ok(Attempt::Acquired(Grant { fence: FencingToken(fence as u64), lease: None }));
        }
        match self.attempt(req).await? {
            Some(locked) => Ok(self.finish(req, locked)),
            None => Ok(Attempt::Held { retry_after: None }),
        }
    }

    fn reenter(&self, key: &str, owner: OwnerToken, signal: &LeaseSignal) -> Option<i64> {
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

    /// Try the lock on a pooled connection, then (with a deadline) wait for it in the server's
    /// queue on the same connection. `None`: held by someone else until the deadline.
    async fn attempt(&self, req: &AcquireRequest<'_>) -> Result<Option<Locked>> {
        let key = advisory_key(req.key);
        let name = req.key.as_bytes();
        // The try answers by the caller's deadline (with the grace a wait gets), or without one
        // within the server's idle bound from when it is sent: a silent server is no hang. Past
        // a deadline the attempt is "not acquired" (the caller's timeout); without one, a
        // temporary error. The pool bounds its checkout itself (its acquire timeout: waiting for
        // a connection under load is no silence of the server); a deadline comes first.
        let by_deadline = req.wait_until.map(|deadline| deadline + CANCEL_GRACE);
        let late = |what| if by_deadline.is_some() { Ok(None) } else { Err(no_answer(what)) };
        let conn = match by_deadline {
            Some(bound) => match tokio::time::timeout_at(bound, self.pool.acquire()).await {
                Ok(conn) => conn.map_err(classify)?,
                Err(_) => return late("a pooled connection"),
            },
            None => self.pool.acquire().await.map_err(classify)?,
        };
        let bound = by_deadline.unwrap_or_else(|| Instant::now() + self.server_idle);
        // Dropped anywhere below before the hold is recorded, `pinned` closes its connection:
        // the server ends the session and any lock it got.
        let mut pinned = Pinned::new(conn);
        let sent = Instant::now();
        self.trips.add();
        let tried = sqlx::query(AssertSqlSafe(self.sql.try_lock.as_str()))
            .bind(key)
            .bind(name)
            .bind(&self.server_idle_text)
            .fetch_one(&mut **pinned.conn);
        let row = match tokio::time::timeout_at(bound, tried).await {
            Ok(row) => row.map_err(classify)?,
            Err(_) => return late("the lock statement"),
        };
        let Granted { ok, fence, pid, idle_before } = granted(&row)?;
        if ok {
            return Ok(Some(Locked { pinned, fence: fence?, pid, confirmed: sent, idle_before }));
        }
        let Some(deadline) = req.wait_until else {
            pinned.clean();
            return Ok(None);
        };
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining < MIN_WAIT {
            pinned.clean();
            return Ok(None);
        }

        // Wait in the server's queue; the server ends the wait at the deadline by itself
        // (lock_timeout). If this future is dropped mid-wait, the wait is cancelled from
        // another connection and `pinned` closes this one, so no grant survives: a grant that
        // raced the cancel goes with the session.
        let (pool, trips) = (self.pool.clone(), self.trips.clone());
        let canceller = Cleanup::arm("postgres lock wait", move || cancel_backend(pool, pid, trips));
        let mut cancelled = false;
        let wait_sent = Instant::now();
        let waited = {
            self.trips.add();
            let fut = sqlx::query(AssertSqlSafe(self.sql.lock_wait.as_str()))
                .bind(key)
                .bind(name)
                .bind(&self.server_idle_text)
                .bind(pg_millis(remaining))
                .fetch_one(&mut **pinned.conn);
            tokio::pin!(fut);
            tokio::select! {
                r = &mut fut => Some(r),
                _ = tokio::time::sleep_until(deadline + CANCEL_GRACE) => {
                    tracing::debug!(pid, "server did not end the lock wait at the deadline; cancelling it");
                    cancelled = true;
                    // Both steps bounded: a server that answers neither is given up, and the
                    // waiting connection closed (a grant that raced goes with the session).
                    let cancel = cancel_backend(self.pool.clone(), pid, self.trips.clone());
                    match tokio::time::timeout(CANCEL_GRACE, cancel).await {
                        Ok(Ok(())) => {}
                        Ok(Err(e)) => tracing::debug!(pid, error = %e, "pg_cancel_backend of a lock wait failed"),
                        Err(_) => tracing::debug!(pid, "no answer to pg_cancel_backend of a lock wait"),
                    }
                    tokio::time::timeout(CANCEL_GRACE, fut).await.ok()
                }
            }
        };
        canceller.disarm();
        // Unanswered even after the cancel: past the deadline, not acquired.
        let Some(waited) = waited else { return Ok(None) };
        match waited {
            Ok(row) => {
                let Granted { fence, pid, idle_before, .. } = granted(&row)?;
                let fence = fence?;
                let confirmed = match waited_grant_anchor(wait_sent, Instant::now(), self.keepalive) {
                    Some(sent) => sent,
                    None => self.confirm(&mut pinned).await?,
                };
                Ok(Some(Locked { pinned, fence, pid, confirmed, idle_before }))
            }
            Err(e) if is_contention(&e) => {
                // A cancel of ours may still be in flight to this backend: never reuse it then.
                if !cancelled {
                    pinned.unlock_stray(key, &self.trips).await;
                }
                Ok(None)
            }
            Err(e) => Err(classify(e)),
        }
    }

    /// A ping on a connection just granted a lock after a long wait, bounded as a keeper's ping
    /// is: its send time, or an error (the connection then closes with `pinned`'s drop, and the
    /// lock goes with the session).
    async fn confirm(&self, pinned: &mut Pinned) -> Result<Instant> {
        let sent = Instant::now();
        self.trips.add();
        let give_up = session_give_up(sent, self.server_idle);
        answered_by("the ping confirming a grant", give_up, pinned.conn.ping()).await?;
        Ok(sent)
    }

    /// Record the hold and start its keeper.
    fn finish(&self, req: &AcquireRequest<'_>, locked: Locked) -> Attempt {
        let Locked { pinned, fence, pid, confirmed, idle_before } = locked;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::channel(KEEPER_QUEUE);
        let signals = Arc::new(Mutex::new(vec![req.signal.clone()]));
        let keeper = Keeper {
            pinned: Some(pinned),
            rx,
            signals: signals.clone(),
            every: self.keepalive,
            confirmed,
            server_idle: self.server_idle,
            holds: Arc::downgrade(&self.holds),
            key: req.key.to_owned(),
            advisory: advisory_key(req.key),
            fence,
            notes_set: self.sql.notes_set.clone(),
            unlock_noted: self.sql.unlock_noted.clone(),
            noted: false,
            idle_before,
            trips: self.trips.clone(),
            id,
        };
        self.holds.lock().insert(
            req.key.to_owned(),
            Hold { id, owner: req.owner, count: 1, fence, pid, cmd: tx, signals },
        );
        tokio::spawn(keeper.run());
        Attempt::Acquired(Grant { fence: FencingToken(fence as u64), lease: None })
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

    pub(crate) async fn inspect(&self, key: &str) -> Result<LockInfo> {
        let (classid, objid) = lock_ids(advisory_key(key));
        self.trips.add();
        let row = sqlx::query(AssertSqlSafe(self.sql.inspect.as_str()))
            .bind(classid)
            .bind(objid)
            .bind(key.as_bytes())
            .fetch_one(&self.pool);
        let row = answered_by("inspect", Instant::now() + self.server_idle, row).await?;
        let holders: i64 = row.try_get(0).map_err(classify)?;
        let waiters: i64 = row.try_get(1).map_err(classify)?;
        let fence: Option<i64> = row.try_get(2).map_err(classify)?;
        if holders == 0 {
            return Ok(LockInfo::free());
        }
        let mut info = LockInfo::held();
        info.waiters = Some(usize::try_from(waiters).unwrap_or(0));
        // The latest grant's fence is the holder's (a name colliding with another shares the
        // lock, not the counter: then this is the name's last holder's).
        info.fence = fence.map(|f| FencingToken(f as u64));
        Ok(info)
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

    /// The note of `key`'s current holder (`sql/notes_read.sql`), one round trip on a pooled
    /// connection.
    pub(crate) async fn note(&self, key: &str) -> Result<Option<String>> {
        let (classid, objid) = lock_ids(advisory_key(key));
        self.trips.add();
        let read = sqlx::query_scalar(AssertSqlSafe(self.sql.notes_read.as_str()))
            .bind(classid)
            .bind(objid)
            .bind(key.as_bytes())
            .fetch_optional(&self.pool);
        answered_by("note", Instant::now() + self.server_idle, read).await
    }
}

/// Await `fut`, a request on a holding connection, as a keeper awaits a ping: every guard of the
/// hold is told `Uncertain` at `uncertain_at` without an answer, and at `give_up` the request is
/// abandoned (`None`).
async fn bounded<T>(
    signals: &Mutex<Vec<LeaseSignal>>,
    key: &str,
    uncertain_at: Instant,
    give_up: Instant,
    fut: impl std::future::Future<Output = std::result::Result<T, sqlx::Error>>,
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

/// An answer of `try_lock.sql` / `lock_wait.sql`.
struct Granted {
    ok: bool,
    /// An error when granted without a counter value.
    fence: Result<i64>,
    pid: i32,
    idle_before: String,
}

fn granted(row: &PgRow) -> Result<Granted> {
    let ok: bool = row.try_get("ok").map_err(classify)?;
    let fence: Option<i64> = row.try_get("fence").map_err(classify)?;
    let pid: i32 = row.try_get("pid").map_err(classify)?;
    let idle_before: String = row.try_get("idle_before").map_err(classify)?;
    let fence = match fence {
        Some(f) if f > 0 => Ok(f),
        _ => Err(LockError::permanent(NAME, "fence counter returned no value")),
    };
    Ok(Granted { ok, fence, pid, idle_before })
}

fn each(signals: &Mutex<Vec<LeaseSignal>>, f: impl Fn(&LeaseSignal)) {
    signals.lock().iter().for_each(f);
}

/// Owns the holding connection for the lock's life: pings it (keep-alive and loss detection),
/// answers renewals, unlocks on release, closes it when the backend is dropped.
///
/// Every ping is bounded: a ping unanswered after one keep-alive period makes the hold
/// `Uncertain`, and when nothing has been confirmed for the server's idle bound (counted from
/// when the last confirmed request was *sent*) less a drift margin, the hold is `Lost` and the
/// connection closed: by then the server may have ended the session and freed the lock.
struct Keeper {
    /// `None` once handed back or closed.
    pinned: Option<Pinned>,
    rx: mpsc::Receiver<Cmd>,
    signals: Arc<Mutex<Vec<LeaseSignal>>>,
    every: Duration,
    /// Send time of the last request the server answered on this connection.
    confirmed: Instant,
    server_idle: Duration,
    holds: Weak<Holds>,
    key: String,
    advisory: i64,
    /// The hold's fence: a note names the hold by it.
    fence: i64,
    notes_set: Arc<str>,
    unlock_noted: Arc<str>,
    /// A note was stored: the release clears it.
    noted: bool,
    idle_before: String,
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

    /// One bounded ping (a protocol Sync, which also restarts the server's idle clock):
    /// `true` when the server answered.
    async fn ping(&mut self) -> bool {
        let sent = Instant::now();
        let (give_up, uncertain_at) = (self.give_up_at(), sent + self.every);
        let (signals, key) = (self.signals.clone(), self.key.clone());
        let Some(pinned) = self.pinned.as_mut() else { return false };
        self.trips.add();
        match bounded(&signals, &key, uncertain_at, give_up, pinned.conn.ping()).await {
            Some(Ok(())) => {}
            Some(Err(e)) => {
                tracing::warn!(%key, error = %e, "connection holding a lock died");
                return false;
            }
            None => return false,
        }
        self.confirmed = sent;
        self.each_signal(LeaseSignal::mark_held);
        true
    }

    /// Store `note` in the name's fence row, on the holding connection, bounded as a ping is
    /// (an answer confirms the session as a ping's does). `None`: the connection died or went
    /// silent, the hold is given up. A statement error (no note columns, no privilege) leaves
    /// the session lock as it was: advisory locks are not transactional.
    async fn note(&mut self, note: &str) -> Option<Result<bool>> {
        let sent = Instant::now();
        let (give_up, uncertain_at) = (self.give_up_at(), sent + self.every);
        let (signals, key) = (self.signals.clone(), self.key.clone());
        let stmt = self.notes_set.clone();
        let pinned = self.pinned.as_mut()?;
        self.trips.add();
        let set = sqlx::query(AssertSqlSafe(stmt))
            .bind(key.as_bytes())
            .bind(self.fence)
            .bind(note)
            .execute(&mut **pinned.conn);
        let out = match bounded(&signals, &key, uncertain_at, give_up, set).await? {
            Err(e) if is_connection_lost(&e) => {
                tracing::warn!(%key, error = %e, "connection holding a lock died");
                return None;
            }
            Err(e) => Err(classify(e)),
            Ok(done) => {
                self.noted |= done.rows_affected() > 0;
                Ok(done.rows_affected() > 0)
            }
        };
        self.confirmed = sent;
        self.each_signal(LeaseSignal::mark_held);
        Some(out)
    }

    /// Unlock (clearing the note when there is one) and hand the connection back, bounded as a
    /// ping is: `Ok(false)` when the connection was gone, and a temporary error when the server
    /// did not answer within its idle bound (the connection is then closed, so the server frees
    /// the lock as it ends the session).
    async fn unlock(&mut self) -> Result<bool> {
        let Some(p) = self.pinned.take() else { return Ok(false) };
        let sent = Instant::now();
        let (give_up, uncertain_at) = (self.give_up_at(), sent + self.every);
        let (signals, key) = (self.signals.clone(), self.key.clone());
        let noted = self.noted.then_some((&self.unlock_noted, key.as_bytes()));
        let unlocked = p.unlock(self.advisory, &self.idle_before, noted, &self.trips);
        match bounded(&signals, &key, uncertain_at, give_up, unlocked).await {
            Some(Ok(released)) => Ok(released),
            Some(Err(e)) if is_connection_lost(&e) => {
                self.each_signal(|s| s.mark_lost(LostReason::SessionEnded));
                Ok(false)
            }
            Some(Err(e)) => Err(classify(e)),
            None => {
                self.each_signal(|s| s.mark_lost(LostReason::SessionEnded));
                Err(no_answer("release"))
            }
        }
    }

    async fn run(mut self) {
        // One period after the confirming send, as after any ping.
        let mut next = self.confirmed + self.every;
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
                    Some(Cmd::Note(note, reply)) => match self.note(&note).await {
                        Some(out) => {
                            let _ = reply.send(out);
                            next = Instant::now() + self.every;
                        }
                        None => {
                            let _ = reply.send(Ok(false));
                            return self.lost();
                        }
                    },
                    Some(Cmd::Release(reply)) => {
                        let _ = reply.send(self.unlock().await);
                        return;
                    }
                    None => {
                        // The backend was dropped: unlock, or close the connection trying.
                        let _ = self.unlock().await;
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
    /// so a server that still has the session ends it now.
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
