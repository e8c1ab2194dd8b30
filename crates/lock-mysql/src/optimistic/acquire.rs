//! One acquisition attempt: the per-key gate, the compare-and-set rounds, and the undo of an
//! attempt cut off before its outcome was known.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use lock_core::backend::session::Trips;
use lock_core::backend::{AcquireRequest, Attempt, Cleanup};
use lock_core::{LockError, OwnerToken, Result};
use sqlx::mysql::{MySqlConnection, MySqlPool};
use sqlx::pool::PoolConnection;
use sqlx::{AssertSqlSafe, MySql};
use tokio::time::Instant;

use super::{Optimistic, SWEEP_EVERY, micros, owner_bytes};
use crate::error::classify;
use crate::notify::Turn;
use crate::session::{KILL_GRACE, no_answer};
use crate::sql::{OptimisticAcquire, OptimisticSql, hex_literal};

/// One acquisition attempt's connection, shared by the attempt and its cleanup: every statement
/// of the attempt goes through it, and if the attempt's future is dropped, the cleanup is sent
/// on this same connection once the attempt let go of it (see [`undo_attempt`]).
type AttemptConn = Arc<tokio::sync::Mutex<PoolConnection<MySql>>>;

/// The undo of an attempt cut off before its outcome was known.
///
/// First `optimistic_cancel_here.sql` on the attempt's own connection: it runs after any
/// statement still buffered there and asks the session whether that statement applied. A
/// cleanup on another connection could run first and miss a grant that lands later. Only if
/// that connection is gone (the attempt's statement then either applied or never will) is the
/// grant undone by its nonce from another connection; a nesting that overwrote the nonce in
/// between leaves that hold to its lease.
async fn undo_attempt(
    conn: AttemptConn,
    pool: MySqlPool,
    sql: Arc<OptimisticSql>,
    key: Vec<u8>,
    owner: [u8; 16],
    nonce: [u8; 16],
    trips: Trips,
) -> Result<()> {
    let here = sql
        .cancel_here
        .replace("{key}", &hex_literal(&key))
        .replace("{owner}", &hex_literal(&owner))
        .replace("{nonce}", &hex_literal(&nonce));
    let mut same = conn.lock().await;
    trips.add();
    // Bounded: the cut-off attempt may have left its connection mid-exchange, and an answer that
    // never comes would keep this attempt's turn (and every later attempt on the key) forever.
    let here =
        tokio::time::timeout(UNDO_BOUND, sqlx::raw_sql(AssertSqlSafe(here)).execute(&mut **same)).await;
    match here {
        Ok(Ok(_)) => return Ok(()),
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "cleanup on the cut-off attempt's connection failed; undoing by its nonce")
        }
        Err(_) => tracing::debug!(
            "no answer on the cut-off attempt's connection within {UNDO_BOUND:?}; closing it and undoing by its nonce"
        ),
    }
    same.close_on_drop();
    drop(same);
    let by_nonce = async {
        let mut other = pool.acquire().await.map_err(classify)?;
        trips.add();
        sqlx::query(AssertSqlSafe(sql.cancel.clone()))
            .bind(key)
            .bind(nonce.to_vec())
            .execute(&mut *other)
            .await
            .map_err(classify)
    };
    match tokio::time::timeout(UNDO_BOUND, by_nonce).await {
        Ok(done) => done.map(drop),
        // The lease frees a grant this undo could not reach.
        Err(_) => Err(LockError::temporary(crate::error::NAME, "undo of a cut-off attempt timed out")),
    }
}

/// The longest an undo statement may wait for its answer before the next way is tried.
const UNDO_BOUND: Duration = Duration::from_secs(2);

/// Rounds of one attempt against a row that keeps changing between its statements: each lost
/// round means another client changed the row meanwhile, so three in a row is contention, and
/// the core's backoff is then the better wait.
const RACE_ROUNDS: usize = 3;

/// The MariaDB acquire's row: owner, version, attempt nonce, remaining lease in µs.
type Answer = (Option<Vec<u8>>, u64, Option<Vec<u8>>, Option<i64>);

/// What one acquisition attempt sends: when it started, the key, owner and nonce bytes, and the
/// lease in microseconds.
#[derive(Clone, Copy)]
struct Ids<'a> {
    sent: Instant,
    key: &'a [u8],
    owner: [u8; 16],
    nonce: [u8; 16],
    lease: u64,
}

impl Optimistic {
    pub(crate) async fn acquire_lease(&self, req: &AcquireRequest<'_>) -> Result<Attempt> {
        let key = req.key.as_bytes();
        let owner = owner_bytes(req.owner);
        let lease = micros(req.lease);
        // A waiting acquisition (the core sends `wait_until` only then) asks the database only at
        // the head of this process's queue for the key; a try_lock always asks.
        if req.wait_until.is_some()
            && let Turn::Wait(nap) = self.waiters.turn(req.key, req.owner)
        {
            return Ok(Attempt::Held { retry_after: Some(nap) });
        }
        let nonce = OwnerToken::random().as_u128().to_be_bytes();
        // The lease is counted from before anything is sent: the local bound can only be early.
        let sent = Instant::now();
        // One attempt per key at a time through this backend, and none while the undo of a cut-off
        // one is still running: a statement of that attempt may still be in its connection's
        // buffer and land (and be undone) later, so a new attempt would see its brief grant.
        // Bounded, from the gate to the last statement (the pool's checkout included): by the
        // caller's deadline (with the grace a session-bound wait gets), else by the response
        // bound. Past a deadline the attempt is "held" (the caller's timeout).
        let bound = match req.wait_until {
            Some(deadline) => deadline.max(sent) + KILL_GRACE,
            None => self.response_bound(),
        };
        let late = || {
            if req.wait_until.is_some() { Ok(Attempt::Held { retry_after: None }) } else { Err(no_answer()) }
        };
        let gate = self.gates.lock().entry(req.key.to_owned()).or_default().clone();
        // The undo of a cut-off attempt may hold the gate for its own bounds.
        let Ok(turn) = tokio::time::timeout_at(bound, gate.lock_owned()).await else { return late() };
        // The checkout too: the pool pings an idle connection before handing it out, and
        // against a silent server that ping waits out the pool's acquire timeout, past the
        // caller's deadline.
        let Ok(checked_out) = tokio::time::timeout_at(bound, self.pool.acquire()).await else {
            return late();
        };
        let conn: AttemptConn = Arc::new(tokio::sync::Mutex::new(checked_out.map_err(classify)?));
        let undo = {
            let (conn, pool, sql, key) = (conn.clone(), self.pool.clone(), self.sql.clone(), key.to_vec());
            let trips = self.trips.clone();
            Cleanup::arm("mysql optimistic attempt", move || async move {
                let undone = undo_attempt(conn, pool, sql, key, owner, nonce, trips).await;
                drop(turn);
                undone
            })
        };
        let ids = Ids { sent, key, owner, nonce, lease };
        // Cut off at the bound, the outcome is open: the undo runs, as for a broken connection.
        let attempt = async { self.attempt(req, &ids, &mut **conn.lock().await).await };
        let (out, cut) = match tokio::time::timeout_at(bound, attempt).await {
            Ok(out) => (out, false),
            Err(_) => (Err(no_answer()), true),
        };
        // A definite answer (acquired, held, or a statement the server refused) needs no undo;
        // a broken connection leaves the outcome open, so the undo runs (in the background).
        if matches!(&out, Err(e) if e.is_temporary()) {
            drop(undo);
        } else {
            undo.disarm();
        }
        let due = out.is_ok()
            && (self.acquisitions.fetch_add(1, Ordering::Relaxed) + 1).is_multiple_of(SWEEP_EVERY);
        if due {
            self.forget_expired();
        }
        if due && self.reclaim {
            let (pool, sql) = (self.pool.clone(), self.sql.sweep.clone());
            self.trips.add();
            tokio::spawn(async move {
                if let Err(e) = sqlx::query(AssertSqlSafe(sql)).execute(&pool).await {
                    tracing::debug!(error = %e, "sweeping unused lock rows failed");
                }
            });
        }
        let mut gates = self.gates.lock();
        if gates.get(req.key).is_some_and(|g| Arc::strong_count(g) == 1) {
            gates.remove(req.key);
        }
        drop(gates);
        if cut {
            return late();
        }
        out
    }

    async fn attempt(
        &self,
        req: &AcquireRequest<'_>,
        ids: &Ids<'_>,
        conn: &mut MySqlConnection,
    ) -> Result<Attempt> {
        let Ids { sent, key, owner, nonce, lease } = *ids;
        // Not the core's retry: a key that was free or this owner's at every instant of the
        // attempt must not be answered `Held` (a try_lock would fail on a free key). A row that
        // changed between two statements (freed, expired, a nesting's version undone by a late
        // cleanup, an insert raced by another client) is looked at again, a bounded number of
        // times.
        for _ in 0..RACE_ROUNDS {
            // Who holds the key (when not us) and for how much longer.
            let (holder, version, left) = match &self.sql.acquire {
                OptimisticAcquire::OneStatement(acquire) => {
                    // MariaDB: take (or create free) in one statement; the row comes back.
                    self.trips.add();
                    let (holder, version, attempt, left): Answer =
                        sqlx::query_as(AssertSqlSafe(acquire.clone()))
                            .bind(key)
                            .bind(&nonce[..])
                            .bind(&owner[..])
                            .bind(lease)
                            .fetch_one(&mut *conn)
                            .await
                            .map_err(classify)?;
                    if attempt.as_deref() == Some(&nonce[..]) {
                        return Ok(self.acquired(req, sent, version, false));
                    }
                    (holder, version, left)
                }
                OptimisticAcquire::TakeOrInsert { take, insert } => {
                    self.trips.add();
                    let took = sqlx::query(AssertSqlSafe(take.clone()))
                        .bind(&owner[..])
                        .bind(&nonce[..])
                        .bind(lease)
                        .bind(key)
                        .execute(&mut *conn)
                        .await
                        .map_err(classify)?;
                    if took.rows_affected() == 1 {
                        return Ok(self.acquired(req, sent, took.last_insert_id(), false));
                    }
                    self.trips.add();
                    let row: Option<(Option<Vec<u8>>, u64, Option<i64>)> =
                        sqlx::query_as(AssertSqlSafe(self.sql.probe.clone()))
                            .bind(key)
                            .fetch_optional(&mut *conn)
                            .await
                            .map_err(classify)?;
                    let Some(row) = row else {
                        // First use of the key: create it already held.
                        self.trips.add();
                        let ins = sqlx::query(AssertSqlSafe(insert.clone()))
                            .bind(key)
                            .bind(&owner[..])
                            .bind(lease)
                            .bind(&nonce[..])
                            .execute(&mut *conn)
                            .await
                            .map_err(classify)?;
                        if ins.rows_affected() == 1 {
                            return Ok(self.acquired(req, sent, ins.last_insert_id(), false));
                        }
                        continue;
                    };
                    row
                }
            };
            match (holder, left) {
                (Some(holder), Some(left)) if left > 0 => {
                    if holder[..] != owner[..] {
                        let left = Duration::from_micros(left.unsigned_abs());
                        let retry = match <[u8; 16]>::try_from(holder.as_slice()) {
                            // A waiting acquisition keeps its place in this process's queue.
                            Ok(b) if req.wait_until.is_some() => {
                                let holder = OwnerToken::from_u128(u128::from_be_bytes(b));
                                self.waiters.hint(req.key, req.owner, holder, left)
                            }
                            _ => left,
                        };
                        return Ok(Attempt::Held { retry_after: Some(retry) });
                    }
                    self.trips.add();
                    let nested = sqlx::query(AssertSqlSafe(self.sql.reenter.clone()))
                        .bind(&nonce[..])
                        .bind(lease)
                        .bind(key)
                        .bind(&owner[..])
                        .bind(version)
                        .execute(&mut *conn)
                        .await
                        .map_err(classify)?;
                    if nested.rows_affected() == 1 {
                        return Ok(self.acquired(req, sent, version, true));
                    }
                }
                // Freed or expired between two statements: look again.
                _ => {}
            }
        }
        Ok(Attempt::Held { retry_after: None })
    }
}
