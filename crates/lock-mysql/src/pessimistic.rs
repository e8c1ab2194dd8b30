//! Pessimistic mode: a lock is a row locked with `SELECT ... FOR UPDATE` by a transaction that
//! stays open, on a connection taken out of the backend's pool of holding connections, until
//! release.
//!
//! Holding connections come from a private pool opened with the same connect options and size
//! as the backend's pool, whose connections carry the holder's session settings from the start
//! (`sql/pessimistic_session*.sql`: autocommit off and the server-side idle bound), so that an
//! acquisition is one prepared statement and a release one `COMMIT`, instead of setting them
//! per acquisition and restoring the server-wide timeouts per release, as a shared pool would
//! need (a third of an uncontended acquire-release pair; figures in `docs/BENCH.md`). The
//! shared pool never sees a holder's settings.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use lock_core::backend::{AcquireRequest, Attempt, Contended, LockInfo, jitter, may_wait};
use lock_core::{FencingToken, LockError, Result};
use sqlx::mysql::MySqlPool;
use sqlx::{AssertSqlSafe, Row};
use tokio::time::Instant;

use crate::error::{NAME, classify, is_contention};
use crate::session::{HeldBy, Pinned, Seen, SessionsExt, answered_by, killable_wait, seen};
use crate::session_mode::{DrawOn, Ends, Locked, Parts, Recipe};
use crate::sql::{Flavor, NoteKind, PessimisticSql, hex_literal};

/// End the holding transaction (release): the connection goes back to the holders' pool with
/// its session settings, which are the pool's own.
const COMMIT: &str = "COMMIT";
/// As [`COMMIT`], rolling back (a lost race, a missing row, a hold with a note, abandon).
const ROLLBACK: &str = "ROLLBACK";

/// Longest statement timeout MariaDB accepts (`max_statement_time`, one year).
const MAX_STATEMENT_SECS: f64 = 31_536_000.0;
/// Times a missing lock row is created and locked again within one attempt. Holding sessions
/// run at READ COMMITTED, so a locking read of a missing neighbour takes no gap lock (under
/// REPEATABLE READ, 512 clients on new keys retried 54 times per acquisition); an insert can
/// still give way to a duplicate-key check's lock on a row another client is creating.
const ROW_ROUNDS: usize = 8;
/// Pause before another round of row creation: long enough for a neighbour's probe to roll back
/// its gap lock, jittered so that two creators do not meet again.
const ROW_RETRY: (Duration, Duration) = (Duration::from_millis(1), Duration::from_millis(5));

enum Step {
    /// Locked, with the connection id and (MariaDB) the fencing token drawn by the lock statement.
    Locked(Locked),
    Held,
    NoRow,
}

/// The pessimistic backend state.
pub(crate) struct Pessimistic {
    /// The backend's pool, the holds (nesting, keepers, renewal, release with `COMMIT`),
    /// holding connections set up with autocommit off and the holds' idle bound.
    parts: Parts,
    sql: PessimisticSql,
    flavor: Flavor,
    /// Keys lately found held: a waiting attempt on one skips the try.
    contended: Contended,
}

impl fmt::Debug for Pessimistic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pessimistic")
            .field("flavor", &self.flavor)
            .field("sessions", &self.parts.sessions)
            .finish()
    }
}

impl Pessimistic {
    /// Needs a runtime (the holders' pool starts its idle reaper).
    pub(crate) fn new(pool: MySqlPool, sql: PessimisticSql, flavor: Flavor, keepalive: Duration) -> Self {
        // A hold with a note ends with ROLLBACK, never COMMIT: the note row must never be committed.
        let ends = Ends {
            release: COMMIT,
            abandon: ROLLBACK,
            kind: NoteKind::Pessimistic,
            begin: None,
            noted: ROLLBACK,
        };
        let parts = Parts::new(pool, (sql.session, &sql.schema, &sql.notes), ends, keepalive);
        Pessimistic { parts, sql, flavor, contended: Contended::default() }
    }

    /// Open a transaction on a fresh pooled connection and lock the row: at once, or waiting in
    /// the server's queue until `wait_until`.
    async fn step(&self, req: &AcquireRequest<'_>) -> Result<Step> {
        let key = req.key.as_bytes();
        let Some(mut pinned) = self.parts.warm.pinned(&self.parts.holders, req).await? else {
            return Ok(Step::Held);
        };
        // A key this backend lately found held is waited for from the first round trip, as a
        // `GET_LOCK(name, wait)` caller does: the try first would only fail, and under
        // contention the server's time is what every hand-over waits for. It needs the
        // connection id (to kill a dropped wait), which a kept connection knows.
        if let (Some(deadline), Some(conn_id)) = (self.contended.wait_at_once(req), pinned.session) {
            return self.wait(req, pinned, conn_id, deadline).await;
        }
        let sent = Instant::now();
        // One round trip: the NOWAIT lock, which opens the holding transaction itself (autocommit
        // is off on holding connections); a grant answers the fencing token and the connection
        // id. Prepared and cached per connection (no one-off CLOSE to trip Nagle, see `wait_sql`).
        self.parts.trips.add();
        let nowait = if req.side.is_shared() { &self.sql.share_nowait } else { &self.sql.lock_nowait };
        let first =
            sqlx::query(AssertSqlSafe(nowait.clone())).bind(key).fetch_optional(&mut **pinned.conn).await;
        match first {
            Ok(Some(row)) => {
                let conn_id: u64 = row.try_get(1).map_err(classify)?;
                let drawn = self.drawn_fence(req, &row)?;
                return Ok(Step::Locked(Locked { pinned, conn_id, drawn, sent, answered: None }));
            }
            Ok(None) => return self.no_row(pinned).await,
            Err(e) if is_contention(&e) => self.contended.found_held(req.key),
            Err(e) => return Err(classify(e)),
        }
        let Some(deadline) = may_wait(req) else { return self.held(pinned).await };
        // Only a held key pays for the connection id (`KILL QUERY` needs it to end the wait), so
        // `acquire()` on a free key costs what `try_lock` costs, and only once per connection (a
        // kept connection knows it). This trip is made while another client holds the key, so
        // it does not delay the hand-over; asking in the first batch instead (`SELECT
        // CONNECTION_ID();` before the lock) would slow every `acquire()` on a free key for no
        // gain under contention (see `docs/BENCH.md`).
        let conn_id = match pinned.session {
            Some(id) => id,
            None => {
                self.parts.trips.add();
                let id: u64 = sqlx::query_scalar("SELECT CONNECTION_ID()")
                    .fetch_one(&mut **pinned.conn)
                    .await
                    .map_err(classify)?;
                pinned.session = Some(id);
                id
            }
        };
        self.wait(req, pinned, conn_id, deadline).await
    }

    /// Wait in the server's queue until `deadline`; the server ends the wait at the deadline by
    /// itself, and a dropped future kills it (`killable_wait`).
    async fn wait(
        &self,
        req: &AcquireRequest<'_>,
        mut pinned: Pinned,
        conn_id: u64,
        deadline: Instant,
    ) -> Result<Step> {
        let remaining = deadline.saturating_duration_since(Instant::now());
        // Text protocol, one packet: see `sql/pessimistic_lock_wait_mariadb.sql`.
        let wait_sent = Instant::now();
        self.parts.trips.add();
        let wait_sql = self.wait_sql(req.side.is_shared(), remaining, req.key.as_bytes());
        let wait = sqlx::raw_sql(AssertSqlSafe(wait_sql)).fetch_optional(&mut **pinned.conn);
        let waited = killable_wait(&self.parts.pool, conn_id, deadline, &self.parts.trips, wait).await;
        // No answer even after the kill: the connection closes with `pinned`, and a grant
        // that raced goes with its session.
        let Some(waited) = waited else { return Ok(Step::Held) };
        match waited {
            // The server's idle clock started when it sent this answer, so no earlier than when
            // the waiting statement was sent: the keeper counts from that send, and after a
            // short wait needs no confirming ping, so the new holder's release is not queued
            // behind one (see `lock_core::backend::session::Granted::answered`).
            Ok(Some(row)) => {
                let fence = self.drawn_fence(req, &row)?;
                let answered = Some(Instant::now());
                Ok(Step::Locked(Locked { pinned, conn_id, drawn: fence, sent: wait_sent, answered }))
            }
            Ok(None) => self.no_row(pinned).await,
            Err(e) if is_contention(&e) => self.held(pinned).await,
            Err(e) => Err(classify(e)),
        }
    }

    /// The fencing token drawn by the MariaDB lock statement (`None` on MySQL: drawn after
    /// the grant); 0 for a shared hold, which draws none.
    fn drawn_fence(&self, req: &AcquireRequest<'_>, row: &sqlx::mysql::MySqlRow) -> Result<Option<u64>> {
        if req.side.is_shared() {
            return Ok(Some(0));
        }
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
    fn wait_sql(&self, shared: bool, remaining: Duration, key: &[u8]) -> String {
        let (mariadb, mysql) = match shared {
            false => (&self.sql.lock_wait_mariadb, &self.sql.lock_wait_mysql),
            true => (&self.sql.share_wait_mariadb, &self.sql.share_wait_mysql),
        };
        match self.flavor {
            Flavor::MariaDb => {
                let secs = remaining.as_secs_f64().min(MAX_STATEMENT_SECS);
                // The row-lock timeout is whole seconds: round up so max_statement_time, which is
                // exact, always ends the wait first.
                let whole = (secs.ceil() as u64).max(1);
                mariadb
                    .replace("{max_statement_time}", &format!("{secs:.6}"))
                    .replace("{lock_wait_timeout}", &whole.to_string())
                    .replace("{key}", &hex_literal(key))
            }
            Flavor::MySql => {
                let ms = remaining.as_millis().clamp(1, u128::from(u32::MAX));
                mysql.replace("{max_execution_ms}", &ms.to_string()).replace("{key}", &hex_literal(key))
            }
        }
    }

    async fn held(&self, pinned: Pinned) -> Result<Step> {
        // After a lock-wait timeout the transaction is still open: end it, keep the connection.
        match crate::session::end(pinned, ROLLBACK, &self.parts.trips).await {
            Ok(clean) => self.parts.warm.put(clean),
            Err(e) => {
                tracing::debug!(error = %e, "rollback after a lost lock race failed; connection closed")
            }
        }
        Ok(Step::Held)
    }

    async fn no_row(&self, pinned: Pinned) -> Result<Step> {
        // The FOR UPDATE on a missing row may have taken a gap lock: end it before inserting.
        crate::session::end(pinned, ROLLBACK, &self.parts.trips).await.map_err(classify)?;
        Ok(Step::NoRow)
    }

    /// Create the lock row outside any transaction, without ever waiting behind a holder.
    async fn create_row(&self, key: &str) -> Result<()> {
        self.parts.trips.add();
        let exists = sqlx::query(AssertSqlSafe(self.sql.row_exists.clone()))
            .bind(key.as_bytes())
            .fetch_optional(&self.parts.pool)
            .await
            .map_err(classify)?;
        if exists.is_some() {
            return Ok(());
        }
        let insert = match self.flavor {
            Flavor::MariaDb => self.sql.row_insert_mariadb.clone(),
            Flavor::MySql => self.sql.row_insert.clone(),
        };
        self.parts.trips.add();
        match sqlx::query(AssertSqlSafe(insert)).bind(key.as_bytes()).execute(&self.parts.pool).await {
            Ok(_) => Ok(()),
            // Someone created and locked it in between: it exists now.
            Err(e) if is_contention(&e) => Ok(()),
            Err(e) => Err(classify(e)),
        }
    }
}

#[async_trait]
impl Recipe for Pessimistic {
    fn parts(&self) -> &Parts {
        &self.parts
    }

    /// One attempt, unbounded: [`SessionMode`](crate::session_mode::SessionMode) bounds it (a
    /// nesting never reaches it).
    async fn attempt(&self, req: &AcquireRequest<'_>) -> Result<Attempt> {
        // The row may have to be created first (once per key). An insert can also give way to
        // another transaction's short-lived gap lock (a NOWAIT probe of a missing neighbour key),
        // so it is tried a few times, briefly apart; misses beyond that mean someone deletes rows under us: a
        // temporary error, which the core retries.
        let mut step = self.step(req).await?;
        for round in 0..ROW_ROUNDS {
            if !matches!(step, Step::NoRow) {
                break;
            }
            if round > 0 {
                tokio::time::sleep(jitter(ROW_RETRY.0, ROW_RETRY.1)).await;
            }
            self.create_row(req.key).await?;
            step = self.step(req).await?;
        }
        match step {
            // Take a fencing token (MySQL: on another pooled connection, in grant order), start
            // the keeper task, record the hold.
            Step::Locked(locked) => {
                let draw = (&self.sql.fence_next, DrawOn::Pool);
                self.parts.hold(req, locked, req.side.is_shared(), draw).await
            }
            Step::Held => Ok(Attempt::Held { retry_after: None }),
            Step::NoRow => Err(LockError::temporary(NAME, "lock row disappeared while locking")),
        }
    }

    /// Shared row locks: `FOR SHARE` / `LOCK IN SHARE MODE`.
    fn shared(&self) -> bool {
        true
    }

    /// The holder as its note row names it (its connection and fence, `session/evict.rs`);
    /// a hold nobody noted is found by locking the row for one statement, skipping it if held
    /// (`sql/pessimistic_probe.sql`): held or free, with no holder or fence to show. Shared
    /// holds (readers) are never noted, so they show as such a holder.
    async fn inspect(&self, key: &str) -> Result<LockInfo> {
        if let Some(Seen { conn: Some(id), fence }) =
            seen(&self.parts, &self.sql.notes, key, &HeldBy::Row).await?
        {
            let mut info = LockInfo::held();
            info.owner = Some(format!("connection {id}"));
            info.fence = fence.map(FencingToken);
            return Ok(info);
        }
        let bound = self.parts.sessions.response_bound();
        self.parts.trips.add();
        let exists = sqlx::query(AssertSqlSafe(self.sql.row_exists.clone()))
            .bind(key.as_bytes())
            .fetch_optional(&self.parts.pool);
        if answered_by(bound, exists).await?.is_none() {
            return Ok(LockInfo::free()); // never locked: the row is made by the first attempt
        }
        self.parts.trips.add();
        let probe = sqlx::query(AssertSqlSafe(self.sql.probe.clone()))
            .bind(key.as_bytes())
            .fetch_optional(&self.parts.pool);
        Ok(match answered_by(bound, probe).await? {
            Some(_) => LockInfo::free(),
            None => LockInfo::held(),
        })
    }

    async fn evict(&self, key: &str, fence: FencingToken) -> Result<bool> {
        crate::session::evict(&self.parts, (&self.sql.notes, self.flavor), key, &HeldBy::Row, fence).await
    }
}
