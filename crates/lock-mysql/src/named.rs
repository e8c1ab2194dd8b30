//! Named mode: a lock is a MySQL/MariaDB user-level lock, `GET_LOCK(name, timeout)`, held by a
//! session on a connection taken out of the pool until `RELEASE_ALL_LOCKS()` at release. The
//! name is the key mapped as .NET's DistributedLock maps it ([`crate::lock_name`]), so services
//! using that library, or calling `GET_LOCK` themselves, share the lock.
//!
//! Session handling (keeper, lost signal, nesting, release) is the pessimistic mode's
//! ([`crate::session`]); only the statements differ.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use futures_util::TryStreamExt;
use lock_core::backend::{AcquireRequest, Attempt, Cleanup, LockInfo, may_wait};
use lock_core::{FencingToken, LockError, OwnerToken, Result};
use sqlx::mysql::{MySqlPool, MySqlRow};
use sqlx::{AssertSqlSafe, Row};
use tokio::time::Instant;

use crate::error::{NAME, classify, is_contention};
use crate::keys::lock_name;
use crate::session::{
    HeldBy, Pinned, Seen, SessionsExt, WAIT_MARK, WaitOf, answered_by, kill_marked, killable_wait, seen,
};
use crate::session_mode::{DrawOn, Ends, Locked, Parts, Recipe};
use crate::sql::{Flavor, NamedSql, NoteKind, hex_literal};

/// Release every named lock of the session: the end of a hold, and of an attempt that got no
/// grant, before the connection is kept for the next acquisition or goes back to the private
/// pool of holding connections (whose sessions keep the holds' idle bounds). The connection
/// carries exactly one `GET_LOCK` of one hold (nesting is counted in the client), so releasing
/// every lock of the session releases exactly it, and a connection never returns to the pool
/// holding a named lock, even one granted by an answer the client did not see.
/// (`RELEASE_ALL_LOCKS`: MySQL 5.7+, MariaDB 10.5+.)
const RELEASE: &str = "DO RELEASE_ALL_LOCKS()";
/// End a hold whose session opened a transaction for notes: `ROLLBACK` first (the note goes
/// before the name is free), then as [`RELEASE`].
const END_NOTED: &str = "ROLLBACK;\nDO RELEASE_ALL_LOCKS()";
/// Longest `GET_LOCK` wait sent, in seconds (a year; the core retries a longer deadline).
const MAX_WAIT_SECS: f64 = 31_536_000.0;

/// What one `GET_LOCK` answered.
enum Answer {
    /// Granted; the token drawn with it (MariaDB) or to draw (MySQL).
    Granted(Option<u64>),
    /// Held by another session until the timeout.
    Held,
    /// `GET_LOCK` answered NULL: the wait was killed (or the server failed it).
    Null,
}

/// The named-lock backend state.
pub(crate) struct Named {
    /// The backend's pool (inspection, `KILL QUERY`), the holds (nesting, keepers, release),
    /// holding connections set up with the holds' idle bound.
    parts: Parts,
    sql: NamedSql,
    flavor: Flavor,
}

impl fmt::Debug for Named {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Named").field("flavor", &self.flavor).field("sessions", &self.parts.sessions).finish()
    }
}

/// `name` as a text literal that cannot end early: `CONVERT(X'..' USING utf8mb4)`, the same
/// string a client sending the name as utf8mb4 text locks.
pub(crate) fn name_literal(name: &str) -> String {
    format!("CONVERT({} USING utf8mb4)", hex_literal(name.as_bytes()))
}

impl Named {
    /// Needs a runtime (the holders' pool starts its idle reaper).
    pub(crate) fn new(pool: MySqlPool, sql: NamedSql, flavor: Flavor, keepalive: Duration) -> Self {
        let begin = Some(sql.note_begin.into());
        let ends =
            Ends { release: RELEASE, abandon: RELEASE, kind: NoteKind::Named, begin, noted: END_NOTED };
        let parts = Parts::new(pool, (sql.session, &sql.schema, &sql.notes), ends, keepalive);
        Named { parts, sql, flavor }
    }

    /// The statement taking `name`, waiting up to `secs` (0: try once).
    fn get_lock(&self, name: &str, secs: f64) -> String {
        self.sql.get_lock.replace("{name}", &name_literal(name)).replace("{timeout}", &format!("{secs:.6}"))
    }

    fn answer(&self, row: &MySqlRow) -> Result<Answer> {
        let v: i64 = row.try_get(0).map_err(classify)?;
        Ok(match (v, self.flavor) {
            (0, _) => Answer::Held,
            (v, _) if v < 0 => Answer::Null,
            (v, Flavor::MariaDb) => Answer::Granted(Some(v.unsigned_abs())),
            (_, Flavor::MySql) => Answer::Granted(None),
        })
    }

    /// A waiting attempt in one round trip, as a bare `GET_LOCK(name, wait)` caller's: the
    /// connection id (unless a kept connection knows it already, [`Self::wait_known`]) and
    /// `GET_LOCK` with the time left, in one batch. The
    /// server answers each statement as it runs, so the id arrives before the wait ends, and a
    /// dropped future kills the wait by it (`killable_wait`): no grant arrives for nobody. In the
    /// one round trip before the id arrives, a drop finds the wait by the statement's mark in
    /// the process list instead (`kill_marked`). A grant that lands anyway goes with the
    /// connection, which `pinned` closes.
    async fn wait_once(
        &self,
        req: &AcquireRequest<'_>,
        mut pinned: Pinned,
        name: &str,
        deadline: Instant,
    ) -> Result<Attempt> {
        let secs = deadline.saturating_duration_since(Instant::now()).as_secs_f64().min(MAX_WAIT_SECS);
        if let Some(conn_id) = pinned.session {
            return self.wait_known(req, pinned, conn_id, (name, secs), deadline).await;
        }
        let mark = OwnerToken::random().to_string();
        let batch = format!("SELECT CONNECTION_ID();\n/* {WAIT_MARK}{mark} */ {}", self.get_lock(name, secs));
        let (pool, trips) = (self.parts.pool.clone(), self.parts.trips.clone());
        let marked = Cleanup::arm("mysql lock wait", move || kill_marked(pool, WaitOf::Mark(mark), trips));
        let sent = Instant::now();
        self.parts.trips.add();
        let mut rows = sqlx::raw_sql(AssertSqlSafe(batch)).fetch(&mut **pinned.conn);
        let conn_id: u64 = match rows.try_next().await.map_err(classify)? {
            Some(row) => row.try_get(0).map_err(classify)?,
            None => return Err(LockError::permanent(NAME, "CONNECTION_ID() answered no row")),
        };
        marked.disarm();
        pinned.session = Some(conn_id);
        let waited =
            killable_wait(&self.parts.pool, conn_id, deadline, &self.parts.trips, rows.try_next()).await;
        // No answer even after the kill: the connection closes with `pinned`, and a grant
        // that raced goes with its session.
        let Some(waited) = waited else { return Ok(Attempt::Held { retry_after: None }) };
        let answer = self.waited(waited)?;
        // The batch's last packet came with its answer: reading it sends nothing.
        while let Ok(Some(_)) = rows.try_next().await {}
        drop(rows);
        self.settle(req, pinned, conn_id, answer, sent).await
    }

    /// What a wait answered: `None` when it ran out (or was killed).
    fn waited(&self, waited: std::result::Result<Option<MySqlRow>, sqlx::Error>) -> Result<Option<Answer>> {
        match waited {
            Ok(Some(row)) => Ok(Some(self.answer(&row)?)),
            Ok(None) => Err(LockError::permanent(NAME, "GET_LOCK answered no row")),
            Err(e) if is_contention(&e) => Ok(None),
            Err(e) => Err(classify(e)),
        }
    }

    /// Hold what a wait sent at `sent` was granted, or give the connection back.
    async fn settle(
        &self,
        req: &AcquireRequest<'_>,
        pinned: Pinned,
        conn_id: u64,
        answer: Option<Answer>,
        sent: Instant,
    ) -> Result<Attempt> {
        match answer {
            // The server's idle clock started when it sent the answer, so no earlier than when
            // the wait was sent: the keeper counts from that send and, after a short wait,
            // needs no confirming ping, so the new holder's first command is its own (a release
            // right away is not queued behind a ping). See
            // `lock_core::backend::session::Granted::answered`.
            Some(Answer::Granted(drawn)) => {
                let answered = Some(Instant::now());
                self.finish(req, Locked { pinned, conn_id, drawn, sent, answered }).await
            }
            _ => self.held(pinned).await,
        }
    }

    /// As [`Self::wait_once`] on a connection whose id is known: `GET_LOCK` alone, a statement
    /// prepared once per connection (no text to parse per wait), answered in one packet. The
    /// wait may not have started when a drop's `KILL QUERY` arrives (it goes on another
    /// connection), so a drop also looks for this session's `GET_LOCK` in the process list
    /// until it has run; at the deadline the id is enough (the wait has started by then).
    async fn wait_known(
        &self,
        req: &AcquireRequest<'_>,
        mut pinned: Pinned,
        conn_id: u64,
        (name, secs): (&str, f64),
        deadline: Instant,
    ) -> Result<Attempt> {
        let (pool, trips) = (self.parts.pool.clone(), self.parts.trips.clone());
        let marked =
            Cleanup::arm("mysql lock wait", move || kill_marked(pool, WaitOf::Session(conn_id), trips));
        let sent = Instant::now();
        self.parts.trips.add();
        let wait = sqlx::query(AssertSqlSafe(self.sql.get_lock_bound.clone()))
            .bind(name)
            .bind(secs)
            .fetch_optional(&mut **pinned.conn);
        let waited = killable_wait(&self.parts.pool, conn_id, deadline, &self.parts.trips, wait).await;
        marked.disarm();
        // No answer even after the kill: as in `wait_once`.
        let Some(waited) = waited else { return Ok(Attempt::Held { retry_after: None }) };
        let answer = self.waited(waited)?;
        self.settle(req, pinned, conn_id, answer, sent).await
    }

    /// Keep the connection of an attempt without a grant for the next attempt (every named lock
    /// of the session released), or close it.
    async fn end(&self, pinned: Pinned) {
        match crate::session::end(pinned, RELEASE, &self.parts.trips).await {
            Ok(clean) => self.parts.warm.put(clean),
            Err(e) => tracing::debug!(error = %e, "ending a GET_LOCK attempt failed; connection closed"),
        }
    }

    async fn held(&self, pinned: Pinned) -> Result<Attempt> {
        self.end(pinned).await;
        Ok(Attempt::Held { retry_after: None })
    }

    /// Granted: take a fencing token (MySQL: on the holding connection), start the keeper,
    /// record the hold.
    async fn finish(&self, req: &AcquireRequest<'_>, locked: Locked) -> Result<Attempt> {
        self.parts.hold(req, locked, false, (&self.sql.fence_next, DrawOn::Holder)).await
    }
}

#[async_trait]
impl Recipe for Named {
    fn parts(&self) -> &Parts {
        &self.parts
    }

    /// One attempt, unbounded: [`SessionMode`](crate::session_mode::SessionMode) bounds it (a
    /// nesting never reaches it). A request that may wait waits in the server's queue from its
    /// first round trip ([`wait_once`](Self::wait_once)); one that may not tries once.
    async fn attempt(&self, req: &AcquireRequest<'_>) -> Result<Attempt> {
        let name = lock_name(req.key);
        let Some(mut pinned) = self.parts.warm.pinned(&self.parts.holders, req).await? else {
            return Ok(Attempt::Held { retry_after: None });
        };
        if let Some(deadline) = may_wait(req) {
            return self.wait_once(req, pinned, &name, deadline).await;
        }
        let sent = Instant::now();
        // One round trip: GET_LOCK(name, 0), which answers the fencing token of a grant
        // (MariaDB) and the connection id; prepared, as a release is (`Pinned::end`).
        self.parts.trips.add();
        let row = sqlx::query(AssertSqlSafe(self.sql.get_lock_bound.clone()))
            .bind(name.as_str())
            .bind(0.0_f64)
            .fetch_optional(&mut **pinned.conn)
            .await
            .map_err(classify)?
            .ok_or_else(|| LockError::permanent(NAME, "GET_LOCK answered no row"))?;
        let conn_id: u64 = row.try_get(1).map_err(classify)?;
        pinned.session = Some(conn_id);
        match self.answer(&row)? {
            Answer::Granted(drawn) => {
                self.finish(req, Locked { pinned, conn_id, drawn, sent, answered: None }).await
            }
            Answer::Null => {
                self.end(pinned).await;
                Err(LockError::temporary(NAME, "GET_LOCK answered NULL"))
            }
            Answer::Held => self.held(pinned).await,
        }
    }

    /// Whether some session holds the key's name (`IS_USED_LOCK`), without taking it, and,
    /// where its holder noted the hold, its fence (`session/evict.rs`).
    async fn inspect(&self, key: &str) -> Result<LockInfo> {
        let by = HeldBy::Name(name_literal(&lock_name(key)));
        let holder = match seen(&self.parts, &self.sql.notes, key, &by).await? {
            Some(seen) => seen,
            None => self.unnoted(key).await?,
        };
        Ok(match holder.conn {
            Some(id) => {
                let mut info = LockInfo::held();
                info.owner = Some(format!("connection {id}"));
                info.fence = holder.fence.map(FencingToken);
                info
            }
            None => LockInfo::free(),
        })
    }

    async fn evict(&self, key: &str, fence: FencingToken) -> Result<bool> {
        let by = HeldBy::Name(name_literal(&lock_name(key)));
        crate::session::evict(&self.parts, (&self.sql.notes, self.flavor), key, &by, fence).await
    }
}

impl Named {
    /// The holder's connection alone, where the notes table does not exist.
    async fn unnoted(&self, key: &str) -> Result<Seen> {
        self.parts.trips.add();
        // BIGINT on MariaDB, BIGINT UNSIGNED on MySQL: read either as a number.
        let asked = sqlx::query_scalar(AssertSqlSafe(self.sql.inspect.clone()))
            .bind(lock_name(key))
            .fetch_one(&self.parts.pool);
        let holder: Option<i64> = answered_by(self.parts.sessions.response_bound(), asked).await?;
        Ok(Seen { conn: holder.and_then(|id| u64::try_from(id).ok()), fence: None })
    }
}
