//! What the two session-bound modes (pessimistic and named) share: a lock that lives exactly as
//! long as one server session, on a connection taken out of the pool for the hold's life.
//!
//! The holds themselves (nesting, the keeper and its lost signal, renewal as a ping, release)
//! are `lock_core::backend::session`'s; this module is their MySQL driver ([`Driver`]): the
//! ping, the statement that ends a hold, and notes. Holding connections come from a private
//! pool whose sessions carry the holds' settings from the start ([`Holding`]); a cleanly
//! ended one is kept for the next hold ([`Kept`]). [`Pinned`] closes a connection that was
//! not ended cleanly, and [`killable_wait`] ends a lock wait in the server with `KILL QUERY`
//! when its future is dropped.
//!
//! Notes on a hold ([`Sessions::set_note`]) are written by the keeper on the holding connection,
//! inside the transaction that lives exactly as long as the hold, and never committed: readers
//! ([`SessionsExt::note`]) see them with `READ UNCOMMITTED`, and every end of the hold rolls them
//! back before the key is free (`sql/notes_session_insert.sql`).

mod evict;
mod kill;
mod warm;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use lock_core::backend::Attempt;
use lock_core::backend::session::{self, Ending, Link, Noted, SessionDriver, Trips};
use lock_core::{LockError, Result};
use sqlx::mysql::MySqlPool;
use sqlx::pool::PoolConnection;
use sqlx::{AssertSqlSafe, Connection, MySql, Row};
use tokio::time::Instant;

use crate::error::{NAME, classify, is_connection_lost, is_refused};
use crate::sql::{NoteKind, hex_literal};
pub(crate) use evict::{HeldBy, Seen, evict, seen};
pub(crate) use kill::{WAIT_MARK, WaitOf, kill_marked, killable_wait};
pub(crate) use warm::{Holding, Kept};

/// How long past the caller's deadline the client waits for the server's own timeout of a lock
/// wait before it cancels the wait itself with `KILL QUERY`: long enough for a loaded server to
/// answer its own timeout, short enough that a caller's deadline stays honest.
pub(crate) const KILL_GRACE: Duration = Duration::from_millis(250);

/// A pooled connection carrying (or about to carry) a session-bound lock, with its connection
/// id once an answer told it: closed on drop unless the lock was ended cleanly ([`end`]).
pub(crate) type Pinned = session::Pinned<PoolConnection<MySql>, u64>;

/// A pinned connection fresh from the pool.
pub(crate) fn pin(conn: PoolConnection<MySql>) -> Pinned {
    Pinned::new(conn, PoolConnection::close_on_drop)
}

/// End the hold on `pinned` with `stmt`; on success the connection is clean: dropped, it goes
/// back to the pool, or it may be kept for the next hold ([`Kept`](warm::Kept)).
///
/// One statement goes prepared, cached per connection: the server parses a text statement
/// on every call, so its execute hands a lock over sooner (docs/BENCH-HISTORY.md, issue 30,
/// fourth part). A batch (named mode's notes rolled back first) cannot be prepared, and the
/// text itself says which it is.
pub(crate) async fn end(
    mut pinned: Pinned,
    stmt: &'static str,
    trips: &Trips,
) -> std::result::Result<Pinned, sqlx::Error> {
    trips.add();
    let sent = Instant::now();
    if stmt.contains(';') {
        sqlx::raw_sql(stmt).execute(&mut **pinned.conn).await?;
    } else {
        sqlx::query(stmt).execute(&mut **pinned.conn).await?;
    }
    pinned.clean(sent);
    Ok(pinned)
}

/// `fut`, requests to the server, answered by `bound`: a server that has not answered by then
/// (paused, partitioned) is a temporary error, and the future is dropped, which closes any
/// connection it had pinned (and kills its lock wait, `killable_wait`), as for any attempt
/// dropped by its caller.
pub(crate) async fn answered_by<T>(
    bound: Instant,
    fut: impl Future<Output = std::result::Result<T, sqlx::Error>>,
) -> Result<T> {
    session::answered_by((NAME, "request"), bound, fut, classify).await
}

/// As [`answered_by`], for a future that classifies its own errors.
async fn by<T>(bound: Instant, fut: impl Future<Output = Result<T>>) -> Result<T> {
    tokio::time::timeout_at(bound, fut).await.unwrap_or_else(|_| Err(no_answer()))
}

pub(crate) fn no_answer() -> LockError {
    session::no_answer(NAME, "request")
}

/// The server-side idle bound for a keep-alive period ([`session::server_idle`]) in whole
/// seconds, the unit of `wait_timeout`.
pub(crate) fn server_idle(keepalive: Duration) -> Duration {
    Duration::from_secs(session::server_idle(keepalive).as_secs_f64().ceil() as u64)
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
    /// key is free), then the hold. At release and abandon.
    pub(crate) end: &'static str,
}

/// The session-bound holds of one mode.
pub(crate) type Sessions = session::Sessions<Driver>;

/// The connection of one hold with the state of its notes.
pub(crate) struct Held {
    pinned: Pinned,
    /// A transaction was opened for notes (named mode).
    in_tx: bool,
    /// The holding transaction carries a note row: the hold ends with `notes.end`.
    noted: bool,
    /// The hold's fencing token, stored with its note so that a force-unlock can name the hold
    /// (`evict.rs`).
    fence: u64,
}

/// A lock granted on `pinned` (session `conn_id`) with the fencing token `fence`, by a request
/// sent at `sent` and, after a wait in the server's queue, answered at `answered`.
///
/// # Errors
/// Permanent when the fence counter answered no value (0) for an exclusive hold.
pub(crate) fn granted(
    pinned: Pinned,
    conn_id: u64,
    (fence, shared): (u64, bool),
    (sent, answered): (Instant, Option<Instant>),
) -> Result<session::Granted<Held>> {
    if fence == 0 && !shared {
        return Err(LockError::permanent(NAME, "fence counter returned no value"));
    }
    let mut pinned = pinned;
    pinned.session = Some(conn_id);
    let held = Held { pinned, in_tx: false, noted: false, fence };
    Ok(session::Granted { held, session: conn_id, fence, sent, answered })
}

/// MySQL: the next fencing token of `key`, drawn after the grant from the counter row by
/// `fence_next` in autocommit on `on` (MariaDB draws it with the lock itself).
pub(crate) async fn next_fence<'c, E>(on: E, fence_next: &Arc<str>, key: &str, trips: &Trips) -> Result<u64>
where
    E: sqlx::Executor<'c, Database = sqlx::MySql>,
{
    trips.add();
    let drawn = sqlx::query(AssertSqlSafe(fence_next.clone())).bind(key.as_bytes()).execute(on).await;
    Ok(drawn.map_err(classify)?.last_insert_id())
}

/// The MySQL side of a mode's holds.
pub(crate) struct Driver {
    /// Ends a hold cleanly: at release.
    release: &'static str,
    /// Ends a hold whose backend was dropped.
    abandon: &'static str,
    notes: SessionNotes,
    trips: Trips,
    /// Where a cleanly released connection is kept for the next hold.
    warm: Option<Arc<Kept>>,
}

impl Driver {
    pub(crate) fn new(
        release: &'static str,
        abandon: &'static str,
        notes: SessionNotes,
        trips: Trips,
    ) -> Self {
        Driver { release, abandon, notes, trips, warm: None }
    }

    /// Keep cleanly released connections in `warm` instead of returning them to their pool.
    pub(crate) fn with_warm(mut self, warm: Arc<Kept>) -> Self {
        self.warm = Some(warm);
        self
    }
}

impl SessionDriver for Driver {
    type Held = Held;
    type Error = sqlx::Error;

    fn name(&self) -> &'static str {
        NAME
    }

    async fn ping(&self, held: &mut Held) -> std::result::Result<(), sqlx::Error> {
        self.trips.add();
        held.pinned.conn.ping().await
    }

    /// The statement for `why`, or the notes' end when the session has a transaction of notes
    /// to roll back first.
    async fn end(&self, _key: &str, held: Held, why: Ending) -> std::result::Result<bool, sqlx::Error> {
        let normal = match why {
            Ending::Release => self.release,
            Ending::Abandon => self.abandon,
        };
        let stmt = if held.noted || held.in_tx { self.notes.end } else { normal };
        let clean = end(held.pinned, stmt, &self.trips).await?;
        if why == Ending::Release
            && let Some(warm) = &self.warm
        {
            warm.put(clean);
        }
        Ok(true)
    }

    /// Store `note` in the holding transaction (opening one first in named mode).
    async fn note(&self, key: &str, held: &mut Held, note: &str, link: &mut Link<'_>) -> Noted {
        let notes = &self.notes;
        if !held.in_tx
            && let Some(begin) = &notes.begin
        {
            self.trips.add();
            let begun = sqlx::raw_sql(AssertSqlSafe(begin.clone())).execute(&mut **held.pinned.conn);
            if let Err(outcome) = answered(link.send(begun).await, link, key) {
                return outcome;
            }
            held.in_tx = true;
        }
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
                .bind(held.fence)
                .bind(note.as_bytes())
        };
        self.trips.add();
        let written = stmt.execute(&mut **held.pinned.conn);
        match answered(link.send(written).await, link, key) {
            Ok(_) => {
                held.noted = true;
                Noted::Answered(Ok(true))
            }
            Err(outcome) => outcome,
        }
    }

    fn connection_lost(&self, e: &sqlx::Error) -> bool {
        is_connection_lost(e)
    }

    fn classify(&self, e: sqlx::Error) -> LockError {
        classify(e)
    }
}

/// A note statement's answer: a refusal before running leaves the transaction as it was; any
/// other failure may have ended it (a deadlock or a lock-wait timeout can roll the whole
/// transaction back, and the row lock with it), so the hold is given up.
fn answered<T>(
    answer: Option<std::result::Result<T, sqlx::Error>>,
    link: &mut Link<'_>,
    key: &str,
) -> std::result::Result<T, Noted> {
    match answer {
        Some(Ok(v)) => {
            link.confirm();
            Ok(v)
        }
        Some(Err(e)) if is_refused(&e) => {
            link.confirm();
            Err(Noted::Answered(Err(classify(e))))
        }
        Some(Err(e)) => {
            tracing::warn!(%key, error = %e, "note on a held lock failed; the lock is given up");
            Err(Noted::Lost)
        }
        None => Err(Noted::Lost),
    }
}

/// What the MySQL modes add to their holds: the bound of a whole attempt, and note reads.
pub(crate) trait SessionsExt {
    /// Run `attempt`, bounded: by its caller's deadline plus room for the server's own timeout
    /// and the `KILL QUERY` after it (`killable_wait`), past which it is "held" (the caller's
    /// timeout); or without a deadline, by the pool's `checkout` timeout (waiting for a
    /// connection under load is no silence of the server) plus the server's idle bound (a server
    /// silent that long is treated as gone by the keepers too), past which it is a temporary
    /// error. Cut off, the attempt is dropped as a cancelled one is: its connection closed, its
    /// wait killed.
    async fn bounded_attempt(
        &self,
        wait_until: Option<Instant>,
        checkout: Duration,
        attempt: impl Future<Output = Result<Attempt>>,
    ) -> Result<Attempt>;

    /// When a single request sent now must have answered: the server's idle bound.
    fn response_bound(&self) -> Instant;

    /// The note of `key`'s current holder, read uncommitted on a pooled connection: only a live
    /// hold's transaction carries one. One round trip.
    async fn note(&self, pool: &MySqlPool, key: &str) -> Result<Option<String>>;
}

impl SessionsExt for Sessions {
    async fn bounded_attempt(
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

    fn response_bound(&self) -> Instant {
        Instant::now() + self.server_idle()
    }

    async fn note(&self, pool: &MySqlPool, key: &str) -> Result<Option<String>> {
        let driver = self.driver();
        let read = driver.notes.read.replace("{key}", &hex_literal(key.as_bytes()));
        driver.trips.add();
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
