//! The recipe: a lock is a session-level advisory lock held by a connection taken out of the
//! pool for the hold's life. This module takes it (a try, then a wait in the server's queue);
//! the hold is then kept by `lock_core::backend::session` (a keeper task per hold pings the
//! connection, answers renewals and stores notes; the release unlocks), through
//! [`Driver`](crate::pinned::Driver).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use lock_core::backend::session::{self, Granted, Trips};
use lock_core::backend::{AcquireRequest, Attempt, Contended, LockInfo, RenewItem, may_wait};
use lock_core::{FencingToken, LockError, OwnerToken, Result};
use sqlx::postgres::{PgPool, PgRow};
use sqlx::{AssertSqlSafe, Row};
use tokio::time::Instant;

use crate::error::{NAME, classify, is_contention};
use crate::keys::{advisory_key, lock_ids};
use crate::pinned::{CANCEL_GRACE, Driver, Held, Pinned, Warm, pin, unlock_stray};
use crate::sql::Sql;

/// `fut`, a request to the server, answered by `bound` (see [`session::answered_by`]).
pub(crate) async fn answered_by<T>(
    what: &'static str,
    bound: Instant,
    fut: impl std::future::Future<Output = std::result::Result<T, sqlx::Error>>,
) -> Result<T> {
    session::answered_by((NAME, what), bound, fut, classify).await
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

/// The backend state: the pool, the statements and the holds of this backend.
pub(crate) struct Advisory {
    pool: PgPool,
    sql: Sql,
    /// `idle_session_timeout` of a holding session: the server ends a holder silent this long.
    server_idle: Duration,
    /// `server_idle` as the setting's text, such as `'300ms'`.
    server_idle_text: String,
    /// The holds: nesting, keepers, renewal, notes, release.
    holds: session::Sessions<Driver>,
    trips: Trips,
    /// Clean connections kept for the next hold, with their backend pids (a pool the builder
    /// opened only).
    warm: Option<Arc<Warm>>,
    /// Keys lately found held: a waiting attempt on one skips its try.
    contended: Contended,
}

impl Advisory {
    pub(crate) fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// The bound of a request outside a hold (an inspection, a record).
    pub(crate) fn server_idle(&self) -> Duration {
        self.server_idle
    }
}

/// A duration as a `lock_timeout` / `idle_session_timeout` value, in whole milliseconds
/// (rounded up, at least 1: 0 would mean "no limit").
fn pg_millis(d: Duration) -> String {
    format!("{}ms", lock_core::backend::millis(d).min(i32::MAX as u64))
}

impl fmt::Debug for Advisory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Advisory").field("holds", &self.holds).finish()
    }
}

impl Advisory {
    /// The backend's state; with `own_pool` (the builder opened `pool`, nobody else uses it)
    /// cleanly released connections are kept for the next hold. Needs a runtime.
    pub(crate) fn new(pool: PgPool, sql: Sql, keepalive: Duration, own_pool: bool) -> Self {
        let server_idle = session::server_idle(keepalive);
        let trips = Trips::default();
        // Kept within a third of the server's idle bound of a holder: the session's own bound
        // (restored at release) is the user's, so a kept connection is handed out only while
        // it was lately used, as a pooled one would be.
        // Nothing is kept while every connection of the pool is out (see `Warm`).
        let full = pool.clone();
        let pressed = move || full.num_idle() == 0 && full.size() >= full.options().get_max_connections();
        let warm = own_pool.then(|| Warm::new(server_idle / 3, pressed));
        let driver = Driver {
            notes_set: sql.notes_set.clone(),
            unlock_noted: sql.unlock_noted.clone(),
            trips: trips.clone(),
            warm: warm.clone(),
        };
        Advisory {
            pool,
            sql,
            server_idle,
            server_idle_text: pg_millis(server_idle),
            holds: session::Sessions::new(driver, keepalive, server_idle),
            trips,
            warm,
            contended: Contended::default(),
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
        self.holds.held_session(key).and_then(|pid| i32::try_from(pid).ok())
    }

    pub(crate) async fn try_acquire(&self, req: &AcquireRequest<'_>) -> Result<Attempt> {
        self.holds.acquire(req, || self.attempt(req)).await
    }

    /// Try the lock on a pooled connection, then (with a deadline) wait for it in the server's
    /// queue on the same connection. `None`: held by someone else until the deadline.
    async fn attempt(&self, req: &AcquireRequest<'_>) -> Result<Option<Granted<Held>>> {
        let key = advisory_key(req.key);
        let name = req.key.as_bytes();
        // The try answers by the caller's deadline (with the grace a wait gets), or without one
        // within the server's idle bound from when it is sent: a silent server is no hang. Past
        // a deadline the attempt is "not acquired" (the caller's timeout); without one, a
        // temporary error. The pool bounds its checkout itself (its acquire timeout: waiting for
        // a connection under load is no silence of the server); a deadline comes first.
        let by_deadline = req.wait_until.map(|deadline| deadline + CANCEL_GRACE);
        let late = |what| if by_deadline.is_some() { Ok(None) } else { Err(session::no_answer(NAME, what)) };
        // Dropped anywhere below before the hold is recorded, `pinned` closes its connection:
        // the server ends the session and any lock it got.
        let mut pinned = match self.warm.as_ref().and_then(|w| w.take()) {
            Some(kept) => kept,
            None => pin(match by_deadline {
                Some(bound) => match tokio::time::timeout_at(bound, self.pool.acquire()).await {
                    Ok(conn) => conn.map_err(classify)?,
                    Err(_) => return late("a pooled connection"),
                },
                None => self.pool.acquire().await.map_err(classify)?,
            }),
        };
        let bound = by_deadline.unwrap_or_else(|| Instant::now() + self.server_idle);
        // A key this backend lately found held is waited for from the first round trip, as a
        // `pg_advisory_lock` caller does: the try first would only fail, and under contention
        // the server's time is what every hand-over waits for. It needs the backend pid (to
        // cancel a dropped wait), which a kept connection knows.
        if let (Some(deadline), Some(pid)) = (self.contended.wait_at_once(req), pinned.session) {
            return self.wait(req, pinned, pid, deadline).await;
        }
        let sent = Instant::now();
        self.trips.add();
        let try_lock = if req.side.is_shared() { &self.sql.try_lock_shared } else { &self.sql.try_lock };
        let tried = sqlx::query(AssertSqlSafe(try_lock.as_str()))
            .bind(key)
            .bind(name)
            .bind(&self.server_idle_text)
            .fetch_one(&mut **pinned.conn);
        let row = match tokio::time::timeout_at(bound, tried).await {
            Ok(row) => row.map_err(classify)?,
            Err(_) => return late("the lock statement"),
        };
        let Answer { ok, fence, pid, idle_before } = answer(&row, req.side.is_shared() || !self.sql.fenced)?;
        pinned.session = Some(pid);
        if ok {
            let held = held(key, req.side.is_shared(), pinned, fence?, pid, idle_before, (sent, None));
            return Ok(Some(held));
        }
        self.contended.found_held(req.key);
        match may_wait(req) {
            Some(deadline) => self.wait(req, pinned, pid, deadline).await,
            None => {
                pinned.clean(sent);
                pinned.keep(self.warm.as_deref());
                Ok(None)
            }
        }
    }

    /// Wait for `req`'s key in the server's queue on `pinned` (backend `pid`) until `deadline`.
    async fn wait(
        &self,
        req: &AcquireRequest<'_>,
        mut pinned: Pinned,
        pid: i32,
        deadline: Instant,
    ) -> Result<Option<Granted<Held>>> {
        let key = advisory_key(req.key);
        let name = req.key.as_bytes();
        let lock_wait = if req.side.is_shared() { &self.sql.lock_wait_shared } else { &self.sql.lock_wait };
        let remaining = deadline.saturating_duration_since(Instant::now());

        // Wait in the server's queue; the server ends the wait at the deadline by itself
        // (lock_timeout). If this future is dropped mid-wait, the wait is cancelled from
        // another connection and `pinned` closes this one, so no grant survives: a grant that
        // raced the cancel goes with the session.
        let (pool, trips) = (self.pool.clone(), self.trips.clone());
        let cancel = move || cancel_backend(pool.clone(), pid, trips.clone());
        let wait_sent = Instant::now();
        self.trips.add();
        let wait = sqlx::query(AssertSqlSafe(lock_wait.as_str()))
            .bind(key)
            .bind(name)
            .bind(&self.server_idle_text)
            .bind(pg_millis(remaining))
            .fetch_one(&mut **pinned.conn);
        let session::Waited { answer: waited, cancelled } =
            session::cancellable_wait("postgres lock wait", (deadline, CANCEL_GRACE), cancel, wait).await;
        // Unanswered even after the cancel: past the deadline, not acquired.
        let Some(waited) = waited else { return Ok(None) };
        match waited {
            Ok(row) => {
                let answered = Instant::now();
                let Answer { fence, pid, idle_before, .. } =
                    answer(&row, req.side.is_shared() || !self.sql.fenced)?;
                let timing = (wait_sent, Some(answered));
                Ok(Some(held(key, req.side.is_shared(), pinned, fence?, pid, idle_before, timing)))
            }
            Err(e) if is_contention(&e) => {
                // A cancel of ours may still be in flight to this backend: never reuse it then.
                if !cancelled {
                    unlock_stray(pinned, key, &self.trips).await;
                }
                Ok(None)
            }
            Err(e) => Err(classify(e)),
        }
    }

    pub(crate) async fn release(&self, key: &str, owner: OwnerToken) -> Result<bool> {
        self.holds.release(key, owner).await
    }

    pub(crate) async fn renew(&self, items: &[RenewItem<'_>]) -> Result<Vec<bool>> {
        self.holds.renew(items).await
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
        let holders: i64 = row.try_get("holders").map_err(classify)?;
        let readers: i64 = row.try_get("readers").map_err(classify)?;
        let waiters: i64 = row.try_get("waiters").map_err(classify)?;
        let fence: Option<i64> = row.try_get("fence").map_err(classify)?;
        if holders == 0 {
            return Ok(LockInfo::free());
        }
        let mut info = LockInfo::held();
        info.waiters = Some(usize::try_from(waiters).unwrap_or(0));
        info.readers = (readers > 0).then(|| usize::try_from(readers).unwrap_or(0));
        // The latest grant's fence is the holder's (a name colliding with another shares the
        // lock, not the counter: then this is the name's last holder's).
        info.fence = fence.map(|f| FencingToken(f as u64));
        Ok(info)
    }

    pub(crate) async fn set_note(&self, key: &str, owner: OwnerToken, note: &str) -> Result<bool> {
        self.holds.set_note(key, owner, note).await
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

/// A lock granted on `pinned` to backend `pid` (advisory key `advisory`, shared or not), by a
/// request sent at `sent` and, after a wait in the server's queue, answered at `answered`.
fn held(
    advisory: i64,
    shared: bool,
    pinned: Pinned,
    fence: i64,
    pid: i32,
    idle_before: String,
    (sent, answered): (Instant, Option<Instant>),
) -> Granted<Held> {
    let held = Held { pinned, advisory, shared, fence, idle_before, noted: false };
    Granted { held, session: u64::from(pid.unsigned_abs()), fence: fence as u64, sent, answered }
}

/// An answer of `try_lock.sql` / `lock_wait.sql`.
struct Answer {
    ok: bool,
    /// An error when granted without a counter value.
    fence: Result<i64>,
    pid: i32,
    idle_before: String,
}

/// A shared grant reads the name's latest fence, 0 when it never had one; an unfenced one
/// (`unfenced`, either) reads 0.
///
/// A session that carries another hold's mark (the statements' `foreign`) is refused: only a
/// transaction-pooling proxy runs this connection's statement on another client's holding
/// server session.
fn answer(row: &PgRow, unfenced: bool) -> Result<Answer> {
    let foreign: Option<String> = row.try_get("foreign").map_err(classify)?;
    if let Some(key) = foreign.filter(|k| !k.is_empty()) {
        return Err(crate::error::pooled(&format!(
            "the server session this connection's statement ran on holds advisory key {key} for \
             another client"
        )));
    }
    let ok: bool = row.try_get("ok").map_err(classify)?;
    let fence: Option<i64> = row.try_get("fence").map_err(classify)?;
    let pid: i32 = row.try_get("pid").map_err(classify)?;
    let idle_before: String = row.try_get("idle_before").map_err(classify)?;
    let fence = match fence {
        Some(f) if f > 0 || (unfenced && f == 0) => Ok(f),
        _ => Err(LockError::permanent(NAME, "fence counter returned no value")),
    };
    Ok(Answer { ok, fence, pid, idle_before })
}
