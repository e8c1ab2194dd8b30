//! Pessimistic mode: a lock is a row locked with `SELECT ... FOR UPDATE` by a transaction that
//! stays open, on a connection taken out of the pool, until release.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use futures_util::StreamExt;
use lock_core::backend::{AcquireRequest, Attempt, Cleanup, Grant, Mutex, RenewItem};
use lock_core::{FencingToken, LeaseSignal, LockError, LostReason, OwnerToken, Result};
use sqlx::mysql::MySqlPool;
use sqlx::pool::PoolConnection;
use sqlx::{AssertSqlSafe, Connection, MySql, Row};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::error::{NAME, classify, is_connection_lost, is_contention};
use crate::sql::{Flavor, PessimisticSql, hex_literal};
use crate::trips::Trips;

/// End the holding transaction and restore the server-wide timeouts of the session before the
/// connection goes back to the pool (MariaDB).
const COMMIT_MARIADB: &str = concat!("COMMIT;\n", include_str!("../sql/pessimistic_restore_mariadb.sql"));
/// As [`COMMIT_MARIADB`], rolling back.
const ROLLBACK_MARIADB: &str = concat!("ROLLBACK;\n", include_str!("../sql/pessimistic_restore_mariadb.sql"));
/// As [`COMMIT_MARIADB`], on MySQL.
const COMMIT_MYSQL: &str = concat!("COMMIT;\n", include_str!("../sql/pessimistic_restore.sql"));
/// As [`ROLLBACK_MARIADB`], on MySQL.
const ROLLBACK_MYSQL: &str = concat!("ROLLBACK;\n", include_str!("../sql/pessimistic_restore.sql"));

/// How long past the caller's deadline the client waits for the server's own statement
/// timeout before it cancels the wait itself with `KILL QUERY`: long enough for a loaded
/// server to answer its own timeout, short enough that a caller's deadline stays honest.
const KILL_GRACE: Duration = Duration::from_millis(250);
/// Waits shorter than this are sent as `NOWAIT` (a statement timeout of 0 means "no limit").
const MIN_WAIT: Duration = Duration::from_millis(1);
/// Longest statement timeout MariaDB accepts (`max_statement_time`, one year).
const MAX_STATEMENT_SECS: f64 = 31_536_000.0;
/// Times a missing lock row is created and locked again within one attempt.
const ROW_ROUNDS: usize = 3;
/// Commands queued to one hold's keeper: a release and a renewal or two at most are ever in
/// flight, so senders never wait.
const KEEPER_QUEUE: usize = 4;

/// A pooled connection carrying (or about to carry) an open transaction. Unless the
/// transaction was ended cleanly, the connection is closed on drop instead of going back to the
/// pool: the server then rolls back and frees the row.
///
/// Not a [`Cleanup`]: nothing is sent on drop (closing the socket is the undo, and it needs no
/// runtime), and the connection is in use until then, so no undo closure could own it.
struct Pinned {
    conn: PoolConnection<MySql>,
    dirty: bool,
}

impl Pinned {
    fn new(conn: PoolConnection<MySql>) -> Self {
        Pinned { conn, dirty: true }
    }

    /// End the transaction and give the session its server-wide idle timeout back; on success
    /// the connection may go back to the pool.
    async fn end(mut self, stmt: &'static str, trips: &Trips) -> std::result::Result<(), sqlx::Error> {
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

enum Cmd {
    /// Is the holding connection alive? (renew)
    Ping(oneshot::Sender<bool>),
    /// COMMIT and hand the connection back.
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

enum Step {
    /// Locked, with the connection id, (MariaDB) the fencing token drawn by the lock statement,
    /// and when the transaction's first statement was sent (the server's idle clock started
    /// no earlier).
    Locked(Pinned, u64, Option<u64>, Instant, bool),
    Held,
    NoRow,
}

/// The pessimistic backend state.
pub(crate) struct Pessimistic {
    pool: MySqlPool,
    sql: PessimisticSql,
    flavor: Flavor,
    keepalive: Duration,
    /// How long the server lets the holding session sit idle before it ends it (and frees the
    /// row): `SET SESSION wait_timeout` at the start of every holding transaction.
    server_idle: Duration,
    /// `SET SESSION wait_timeout = .., ...; BEGIN` (the lock statement follows in one batch).
    begin: Arc<str>,
    /// `COMMIT` / `ROLLBACK` and the session's timeouts restored, for this flavor.
    commit: &'static str,
    rollback: &'static str,
    holds: Arc<Holds>,
    next_id: AtomicU64,
    trips: Trips,
}

/// The server-side idle bound for a keep-alive period: three periods, in whole seconds (the
/// unit of `wait_timeout`), at least 2 s. A holder that cannot reach the server for that long
/// has its session ended by the server; the client gives the hold up a drift margin earlier.
fn server_idle(keepalive: Duration) -> Duration {
    Duration::from_secs((keepalive * 3).as_secs_f64().ceil().max(2.0) as u64)
}

impl fmt::Debug for Pessimistic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pessimistic")
            .field("flavor", &self.flavor)
            .field("keepalive", &self.keepalive)
            .field("held", &self.holds.lock().len())
            .finish()
    }
}

impl Pessimistic {
    pub(crate) fn new(pool: MySqlPool, sql: PessimisticSql, flavor: Flavor, keepalive: Duration) -> Self {
        let server_idle = server_idle(keepalive);
        let begin = sql.begin.replace("{idle}", &server_idle.as_secs().to_string()).into();
        let (commit, rollback) = match flavor {
            Flavor::MariaDb => (COMMIT_MARIADB, ROLLBACK_MARIADB),
            Flavor::MySql => (COMMIT_MYSQL, ROLLBACK_MYSQL),
        };
        Pessimistic {
            pool,
            sql,
            flavor,
            keepalive,
            server_idle,
            begin,
            commit,
            rollback,
            holds: Arc::default(),
            next_id: AtomicU64::new(0),
            trips: Trips::default(),
        }
    }

    pub(crate) fn schema(&self) -> &Arc<str> {
        &self.sql.schema
    }

    #[cfg(feature = "testing")]
    pub(crate) fn trips(&self) -> &Trips {
        &self.trips
    }

    /// Connection id (`CONNECTION_ID()`) of the connection holding `key`, if held here.
    #[cfg(feature = "testing")]
    pub(crate) fn held_connection_id(&self, key: &str) -> Option<u64> {
        self.holds.lock().get(key).filter(|h| !h.cmd.is_closed()).map(|h| h.conn_id)
    }

    pub(crate) async fn try_acquire(&self, req: &AcquireRequest<'_>) -> Result<Attempt> {
        if let Some(fence) = self.reenter(req.key, req.owner, req.signal) {
            return Ok(Attempt::Acquired(Grant { fence: FencingToken(fence), lease: None }));
        }
        // The row may have to be created first (once per key). An insert can also give way to
        // another transaction's short-lived gap lock (a NOWAIT probe of a missing neighbour key),
        // so it is tried a few times; misses beyond that mean someone deletes rows under us: a
        // temporary error, which the core retries.
        let mut step = self.attempt(req).await?;
        for _ in 0..ROW_ROUNDS {
            if !matches!(step, Step::NoRow) {
                break;
            }
            self.create_row(req.key).await?;
            step = self.attempt(req).await?;
        }
        match step {
            Step::Locked(pinned, conn_id, fence, confirmed, waited) => {
                self.finish(req, pinned, conn_id, fence, (confirmed, waited)).await
            }
            Step::Held => Ok(Attempt::Held { retry_after: None }),
            Step::NoRow => Err(LockError::temporary(NAME, "lock row disappeared while locking")),
        }
    }

    fn reenter(&self, key: &str, owner: OwnerToken, signal: &LeaseSignal) -> Option<u64> {
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

    /// Open a transaction on a fresh pooled connection and lock the row: at once, or waiting in
    /// the server's queue until `wait_until`.
    async fn attempt(&self, req: &AcquireRequest<'_>) -> Result<Step> {
        let key = req.key.as_bytes();
        let mut pinned = Pinned::new(self.pool.acquire().await.map_err(classify)?);
        let sent = Instant::now();
        // One round trip: the session bounds, BEGIN and the NOWAIT lock as one text batch (the
        // key as a hex literal); a grant answers the fencing token and the connection id.
        let lock = self.sql.lock_nowait.replace("{key}", &hex_literal(key));
        let batch = format!("{};\n{lock}", self.begin);
        self.trips.add();
        let first = {
            let mut rows = sqlx::raw_sql(AssertSqlSafe(batch)).fetch(&mut *pinned.conn);
            let first = rows.next().await.transpose();
            // Read the batch to its end: the connection must be idle before the next statement.
            if let Ok(Some(_)) = first {
                while let Some(more) = rows.next().await {
                    more.map_err(classify)?;
                }
            }
            first
        };
        match first {
            Ok(Some(row)) => {
                let conn_id: u64 = row.try_get(1).map_err(classify)?;
                return Ok(Step::Locked(pinned, conn_id, self.drawn_fence(&row)?, sent, false));
            }
            Ok(None) => return self.no_row(pinned).await,
            Err(e) if is_contention(&e) => {}
            Err(e) => return Err(classify(e)),
        }
        let Some(deadline) = req.wait_until else { return self.held(pinned).await };
        if deadline.saturating_duration_since(Instant::now()) < MIN_WAIT {
            return self.held(pinned).await;
        }
        // Only a held key pays for the connection id (`KILL QUERY` needs it to end the wait), so
        // `acquire()` on a free key costs what `try_lock` costs; this trip overlaps the wait.
        self.trips.add();
        let conn_id: u64 = sqlx::query_scalar("SELECT CONNECTION_ID()")
            .fetch_one(&mut *pinned.conn)
            .await
            .map_err(classify)?;
        let remaining = deadline.saturating_duration_since(Instant::now());

        // Wait in the server's queue; the server ends the wait at the deadline by itself. If
        // this future is dropped mid-wait, the wait is killed so it does not linger in the row's
        // queue (closing the connection would not end it: InnoDB does not read the socket then).
        let (pool, trips) = (self.pool.clone(), self.trips.clone());
        let killer = Cleanup::arm("mysql lock wait", move || kill_query(pool, conn_id, trips));
        let waited = {
            // Text protocol, one packet: see `sql/pessimistic_lock_wait_mariadb.sql`.
            self.trips.add();
            let fut =
                sqlx::raw_sql(AssertSqlSafe(self.wait_sql(remaining, key))).fetch_optional(&mut *pinned.conn);
            tokio::pin!(fut);
            tokio::select! {
                r = &mut fut => r,
                _ = tokio::time::sleep_until(deadline + KILL_GRACE) => {
                    tracing::debug!(conn_id, "server did not end the lock wait at the deadline; killing it");
                    if let Err(e) = kill_query(self.pool.clone(), conn_id, self.trips.clone()).await {
                        tracing::debug!(conn_id, error = %e, "KILL QUERY of a lock wait failed");
                    }
                    fut.await
                }
            }
        };
        killer.disarm();
        match waited {
            // The server's idle clock started when it answered, possibly long after the wait was
            // sent: take the arrival of the answer (one-way delay must stay under the drift
            // margin), and the keeper re-anchors on a ping's send time at once.
            Ok(Some(row)) => Ok(Step::Locked(pinned, conn_id, self.drawn_fence(&row)?, Instant::now(), true)),
            Ok(None) => self.no_row(pinned).await,
            Err(e) if is_contention(&e) => self.held(pinned).await,
            Err(e) => Err(classify(e)),
        }
    }

    /// The fencing token drawn by the MariaDB lock statement (`None` on MySQL).
    fn drawn_fence(&self, row: &sqlx::mysql::MySqlRow) -> Result<Option<u64>> {
        match self.flavor {
            Flavor::MariaDb => {
                let v: i64 = row.try_get(0).map_err(classify)?;
                Ok(Some(u64::try_from(v).unwrap_or(0)))
            }
            Flavor::MySql => Ok(None),
        }
    }

    /// The waiting statement with the remaining time spliced in as numbers (SET STATEMENT and
    /// optimizer hints take no placeholders) and the key as a hex literal. Its text differs on
    /// every call, so it is sent as one text-protocol query: a one-off prepared statement sends
    /// EXECUTE and CLOSE back to back, and Nagle then delays the holder's next command (its
    /// COMMIT, with the row still locked) until the server's delayed ACK, ~40 ms.
    fn wait_sql(&self, remaining: Duration, key: &[u8]) -> String {
        match self.flavor {
            Flavor::MariaDb => {
                let secs = remaining.as_secs_f64().min(MAX_STATEMENT_SECS);
                // The row-lock timeout is whole seconds: round up so max_statement_time, which is
                // exact, always ends the wait first.
                let whole = (secs.ceil() as u64).max(1);
                self.sql
                    .lock_wait_mariadb
                    .replace("{max_statement_time}", &format!("{secs:.6}"))
                    .replace("{lock_wait_timeout}", &whole.to_string())
                    .replace("{key}", &hex_literal(key))
            }
            Flavor::MySql => {
                let ms = remaining.as_millis().clamp(1, u128::from(u32::MAX));
                self.sql
                    .lock_wait_mysql
                    .replace("{max_execution_ms}", &ms.to_string())
                    .replace("{key}", &hex_literal(key))
            }
        }
    }

    async fn held(&self, pinned: Pinned) -> Result<Step> {
        // After a lock-wait timeout the transaction is still open: end it, keep the connection.
        if let Err(e) = pinned.end(self.rollback, &self.trips).await {
            tracing::debug!(error = %e, "rollback after a lost lock race failed; connection closed");
        }
        Ok(Step::Held)
    }

    async fn no_row(&self, pinned: Pinned) -> Result<Step> {
        // The FOR UPDATE on a missing row may have taken a gap lock: end it before inserting.
        pinned.end(self.rollback, &self.trips).await.map_err(classify)?;
        Ok(Step::NoRow)
    }

    /// Create the lock row outside any transaction, without ever waiting behind a holder.
    async fn create_row(&self, key: &str) -> Result<()> {
        self.trips.add();
        let exists = sqlx::query(AssertSqlSafe(self.sql.row_exists.clone()))
            .bind(key.as_bytes())
            .fetch_optional(&self.pool)
            .await
            .map_err(classify)?;
        if exists.is_some() {
            return Ok(());
        }
        let insert = match self.flavor {
            Flavor::MariaDb => self.sql.row_insert_mariadb.clone(),
            Flavor::MySql => self.sql.row_insert.clone(),
        };
        self.trips.add();
        match sqlx::query(AssertSqlSafe(insert)).bind(key.as_bytes()).execute(&self.pool).await {
            Ok(_) => Ok(()),
            // Someone created and locked it in between: it exists now.
            Err(e) if is_contention(&e) => Ok(()),
            Err(e) => Err(classify(e)),
        }
    }

    /// The row is locked: take a fencing token (MySQL), start the keeper task, record the hold.
    async fn finish(
        &self,
        req: &AcquireRequest<'_>,
        pinned: Pinned,
        conn_id: u64,
        drawn: Option<u64>,
        (confirmed, waited): (Instant, bool),
    ) -> Result<Attempt> {
        let fence = match drawn {
            Some(f) => f,
            // MySQL: autocommit, on another pooled connection, after the grant (grant order;
            // survives the holder's rollback). If this future is dropped here, `pinned` closes
            // its connection and the lock goes with it.
            None => {
                self.trips.add();
                sqlx::query(AssertSqlSafe(self.sql.fence_next.clone()))
                    .bind(req.key.as_bytes())
                    .execute(&self.pool)
                    .await
                    .map_err(classify)?
                    .last_insert_id()
            }
        };
        if fence == 0 {
            return Err(LockError::permanent(NAME, "fence counter returned no value"));
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::channel(KEEPER_QUEUE);
        let signals = Arc::new(Mutex::new(vec![req.signal.clone()]));
        let keeper = Keeper {
            pinned,
            rx,
            signals: signals.clone(),
            every: self.keepalive,
            confirmed,
            waited,
            server_idle: self.server_idle,
            commit: self.commit,
            rollback: self.rollback,
            holds: Arc::downgrade(&self.holds),
            trips: self.trips.clone(),
            key: req.key.to_owned(),
            id,
        };
        self.holds.lock().insert(
            req.key.to_owned(),
            Hold { id, owner: req.owner, count: 1, fence, conn_id, cmd: tx, signals },
        );
        tokio::spawn(keeper.run());
        Ok(Attempt::Acquired(Grant { fence: FencingToken(fence), lease: None }))
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
/// answers renewals, commits on release, rolls back when the backend is dropped.
///
/// Every ping is bounded: a ping unanswered after one keep-alive period makes the hold
/// `Uncertain`, and when nothing has been confirmed for the server's idle bound (counted from
/// when the last confirmed request was *sent*) less a drift margin, the hold is `Lost` and the
/// connection closed: by then the server may have ended the session and freed the row.
struct Keeper {
    pinned: Pinned,
    rx: mpsc::Receiver<Cmd>,
    signals: Arc<Mutex<Vec<LeaseSignal>>>,
    every: Duration,
    /// Send time of the last request the server answered on this connection.
    confirmed: Instant,
    /// Granted after a wait in the server's queue (`confirmed` is the answer's arrival).
    waited: bool,
    server_idle: Duration,
    commit: &'static str,
    rollback: &'static str,
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
        // A lock granted after a wait was confirmed by an answer, not by a send: ping at once.
        let mut next = if self.waited { Instant::now() } else { Instant::now() + self.every };
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
                        let out = match self.pinned.end(self.commit, &self.trips).await {
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
                        // The backend was dropped: end the transaction, free the row.
                        let _ = self.pinned.end(self.rollback, &self.trips).await;
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

    /// The connection died or went silent past the server's idle bound: the row is (or will
    /// at once be) free for others. Every guard of the hold is told; the connection is closed,
    /// so a server that still holds the session rolls back now.
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
