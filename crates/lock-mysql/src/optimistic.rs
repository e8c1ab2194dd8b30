//! Optimistic mode: a lease row taken and released by compare-and-set statements judged by the
//! database clock; `version` is the fencing token.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use lock_core::backend::session::Trips;
use lock_core::backend::{AcquireRequest, Attempt, Cleanup, Grant, LockInfo, Mutex, RenewItem, Subscription};
use lock_core::{FencingToken, LeaseSignal, LockError, LostReason, OwnerToken, Result};
use sqlx::mysql::{MySqlConnection, MySqlPool};
use sqlx::pool::PoolConnection;
use sqlx::{AssertSqlSafe, MySql};
use tokio::time::Instant;

use crate::error::classify;
use crate::session::{KILL_GRACE, answered_by, no_answer};
use crate::sql::{OptimisticSql, hex_literal};
use crate::waiters::{Turn, Waiters};

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

/// What this client holds of one (key, owner): the version it acquired (CAS operand), its
/// nesting depth, a local bound on the lease, and the lost signal of every acquisition of it.
#[derive(Debug)]
struct Local {
    version: u64,
    count: u32,
    /// No later than the lease's end on the server (counted from request send times).
    until: Instant,
    signals: Vec<LeaseSignal>,
}

impl Local {
    /// Tell every guard of this hold that it is lost.
    fn lost(&self, reason: LostReason) {
        for s in &self.signals {
            s.mark_lost(reason);
        }
    }
}

type LocalMap = HashMap<(String, OwnerToken), Local>;

/// Rows of unused keys are swept (MariaDB) once every this many acquisitions of a client, and
/// local entries of holds whose lease ran out unreleased are dropped as often: rare enough to
/// cost nothing per acquisition, often enough that neither piles up.
const SWEEP_EVERY: u64 = 1024;
/// Rounds of one attempt against a row that keeps changing between its statements: each lost
/// round means another client changed the row meanwhile, so three in a row is contention, and
/// the core's backoff is then the better wait.
const RACE_ROUNDS: usize = 3;
/// Local entries are kept this long past their lease (the core gave them up before the lease
/// ended, so no release or renewal can still need them).
const LOCAL_GRACE: Duration = Duration::from_secs(1);

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

/// The optimistic backend state.
pub(crate) struct Optimistic {
    pool: MySqlPool,
    sql: Arc<OptimisticSql>,
    local: Mutex<LocalMap>,
    /// MariaDB: fences come from a sequence, so rows of unused keys may be deleted.
    reclaim: bool,
    acquisitions: AtomicU64,
    /// This process's waiters and holders of the lock space (shared with its other backends).
    waiters: Arc<Waiters>,
    /// Per key, held by an attempt (and by its undo, if it was cut off).
    gates: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    trips: Trips,
}

impl fmt::Debug for Optimistic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Optimistic").field("held", &self.local.lock().len()).finish()
    }
}

fn owner_bytes(owner: OwnerToken) -> [u8; 16] {
    owner.as_u128().to_be_bytes()
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

impl Optimistic {
    pub(crate) fn new(pool: MySqlPool, sql: OptimisticSql, reclaim: bool, waiters: Arc<Waiters>) -> Self {
        Optimistic {
            pool,
            sql: Arc::new(sql),
            local: Mutex::default(),
            reclaim,
            acquisitions: Default::default(),
            waiters,
            gates: Mutex::default(),
            trips: Trips::default(),
        }
    }

    #[cfg(feature = "testing")]
    pub(crate) fn trips(&self) -> &Trips {
        &self.trips
    }

    /// Release notifications of `key`: fed by every release in this process.
    pub(crate) fn subscribe(&self, key: &str) -> Subscription {
        self.waiters.subscribe(key)
    }

    /// A queued acquisition ended without a grant.
    pub(crate) fn leave_queue(&self, key: &str, owner: OwnerToken) {
        self.waiters.leave(key, owner);
    }

    pub(crate) fn schema(&self) -> &Arc<str> {
        &self.sql.schema
    }

    pub(crate) fn notes_schema(&self) -> Arc<str> {
        self.sql.notes.schema.clone()
    }

    /// A table created before UTC leases (no `attempt` column) is refused, or upgraded when
    /// the caller says every old client has stopped: its expiry times were written in session
    /// time zones, so old and new clients would disagree about who holds a key.
    pub(crate) async fn check_shape(&self, table: &str, upgrade: bool) -> Result<()> {
        let (columns, has_attempt): (i64, i64) =
            sqlx::query_as(include_str!("../sql/optimistic_has_attempt.sql"))
                .bind(table)
                .fetch_one(&self.pool)
                .await
                .map_err(classify)?;
        if columns == 0 || has_attempt > 0 {
            return Ok(());
        }
        if !upgrade {
            return Err(LockError::InvalidConfig {
                reason: format!(
                    "lock table `{table}` was created by an older lock-mysql whose leases were written in \
                     the session time zone (NOW(6)); stop every client of the older version, then build \
                     once with upgrade_table(true) (frees its leases, keeps versions), or use a new table"
                ),
            });
        }
        sqlx::raw_sql(AssertSqlSafe(self.sql.upgrade.clone())).execute(&self.pool).await.map_err(classify)?;
        Ok(())
    }

    /// Record a grant (`nested`: one more hold of the grant `version` this owner has).
    fn acquired(&self, req: &AcquireRequest<'_>, sent: Instant, version: u64, nested: bool) -> Attempt {
        let until = sent + req.lease;
        let mut local = self.local.lock();
        let fresh = || Local { version, count: 0, until, signals: vec![req.signal.clone()] };
        let e = local.entry((req.key.to_owned(), req.owner)).or_insert_with(fresh);
        if !nested || e.version != version {
            // A new grant: an older hold of this owner still on record ended without a release
            // (its lease ran out); its guards must not outlive it.
            for s in e.signals.iter().filter(|s| !s.same_as(req.signal)) {
                s.mark_lost(LostReason::NotOwner);
            }
            if e.count > 0 {
                self.waiters.released(req.key, req.owner, true);
            }
            *e = fresh();
        } else if !e.signals.iter().any(|s| s.same_as(req.signal)) {
            e.signals.push(req.signal.clone());
        }
        e.count += 1;
        e.until = e.until.max(until);
        drop(local);
        self.waiters.granted(req.key, req.owner, until);
        Attempt::Acquired(Grant { fence: FencingToken(version), lease: Some(req.lease) })
    }

    /// Drop the local entries of holds whose lease ran out without a release or renewal.
    fn forget_expired(&self) {
        let now = Instant::now();
        self.local.lock().retain(|_, l| l.until + LOCAL_GRACE > now);
        self.waiters.prune();
    }

    pub(crate) async fn try_acquire(&self, req: &AcquireRequest<'_>) -> Result<Attempt> {
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
        // Bounded: by the caller's deadline (with the grace a session-bound wait gets), else by
        // the response bound. Past a deadline the attempt is "held" (the caller's timeout).
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
        let conn: AttemptConn =
            Arc::new(tokio::sync::Mutex::new(self.pool.acquire().await.map_err(classify)?));
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

    /// When a request sent now must have answered: the pool's acquire timeout, the longest this
    /// backend waits for the server to give it a connection at all.
    fn response_bound(&self) -> Instant {
        Instant::now() + self.pool.options().get_acquire_timeout()
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
            let (holder, version, left) = if let Some(acquire) = &self.sql.acquire {
                // MariaDB: insert or take in one statement; the row comes back.
                self.trips.add();
                let (holder, version, attempt, left): Answer = sqlx::query_as(AssertSqlSafe(acquire.clone()))
                    .bind(key)
                    .bind(&owner[..])
                    .bind(lease)
                    .bind(&nonce[..])
                    .fetch_one(&mut *conn)
                    .await
                    .map_err(classify)?;
                if attempt.as_deref() == Some(&nonce[..]) {
                    return Ok(self.acquired(req, sent, version, false));
                }
                (holder, version, left)
            } else {
                self.trips.add();
                let took = sqlx::query(AssertSqlSafe(self.sql.take.clone()))
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
                    let ins = sqlx::query(AssertSqlSafe(self.sql.insert.clone()))
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

    pub(crate) async fn release(&self, key: &str, owner: OwnerToken) -> Result<bool> {
        let id = (key.to_owned(), owner);
        let Some((version, count)) = self.local.lock().get(&id).map(|l| (l.version, l.count)) else {
            return Ok(false);
        };
        // Each statement bounded: a compare-and-set on this hold's version that lands after its
        // future was given up only ends this hold, never a later one.
        let cas = |sql: &Arc<str>| {
            self.trips.add();
            let stmt = sqlx::query(AssertSqlSafe(sql.clone()))
                .bind(key.as_bytes())
                .bind(owner_bytes(owner).to_vec())
                .bind(version)
                .execute(&self.pool);
            answered_by(self.response_bound(), stmt)
        };
        // The last hold on MariaDB deletes the row (per-key state does not pile up); a row with
        // more holds than this client knows of (a nesting by another client) falls back to the
        // update.
        let deleted = self.reclaim && count == 1 && cas(&self.sql.release_delete).await?.rows_affected() == 1;
        let released = deleted || cas(&self.sql.release).await?.rows_affected() == 1;
        let mut local = self.local.lock();
        match local.get_mut(&id) {
            // Another grant was recorded meanwhile: not ours to touch.
            Some(l) if l.version != version => {}
            Some(l) if released && l.count > 1 => l.count -= 1,
            Some(_) => {
                if let Some(l) = local.remove(&id)
                    && !released
                {
                    // The lease was gone: every guard of the hold learns it, not only this one.
                    l.lost(LostReason::NotOwner);
                }
            }
            None => {}
        }
        drop(local);
        // The head of this process's queue for the key is woken (the key is free, or the
        // lease that held it is gone).
        self.waiters.released(key, owner, !released);
        Ok(released)
    }

    /// The row as it stands: held while `owner` is set and the lease runs by the DB clock.
    pub(crate) async fn inspect(&self, key: &str) -> Result<LockInfo> {
        self.trips.add();
        let row: Option<(Option<Vec<u8>>, u64, Option<i64>)> = answered_by(
            self.response_bound(),
            sqlx::query_as(AssertSqlSafe(self.sql.probe.clone()))
                .bind(key.as_bytes())
                .fetch_optional(&self.pool),
        )
        .await?;
        Ok(match row {
            Some((Some(owner), version, Some(left))) if left > 0 => {
                let mut info = LockInfo::held();
                info.remaining = Some(Duration::from_micros(left.unsigned_abs()));
                info.fence = Some(FencingToken(version));
                info.owner = <[u8; 16]>::try_from(owner.as_slice()).ok().map(|b| {
                    LockInfo::short_owner(&OwnerToken::from_u128(u128::from_be_bytes(b)).to_string())
                });
                info
            }
            _ => LockInfo::free(),
        })
    }

    /// Store `note` with `owner`'s live hold of `key`, judged by the database clock in the same
    /// autocommit statement (`sql/notes_optimistic_set.sql`). One round trip. A dropped future
    /// may leave the statement to run later: it then stores the note with the hold live at that
    /// moment, or nothing (a row naming an ended hold is never read back).
    pub(crate) async fn set_note(&self, key: &str, owner: OwnerToken, note: &str) -> Result<bool> {
        self.trips.add();
        let set = sqlx::query(AssertSqlSafe(self.sql.notes.optimistic_set.clone()))
            .bind(note.as_bytes())
            .bind(key.as_bytes())
            .bind(&owner_bytes(owner)[..])
            .execute(&self.pool);
        let set = answered_by(self.response_bound(), set).await?;
        // 1 inserted, 2 replaced (1 if unchanged: sqlx counts matched rows); 0: not held.
        Ok(set.rows_affected() > 0)
    }

    /// The current hold's note: the note row must name the lock row's owner and version, on a
    /// live lease. One round trip.
    pub(crate) async fn note(&self, key: &str) -> Result<Option<String>> {
        self.trips.add();
        let read = sqlx::query(AssertSqlSafe(self.sql.notes.optimistic_read.clone()))
            .bind(key.as_bytes())
            .fetch_optional(&self.pool);
        let row = answered_by(self.response_bound(), read).await?;
        crate::session::note_of(row.as_ref())
    }

    pub(crate) async fn renew(&self, items: &[RenewItem<'_>]) -> Result<Vec<bool>> {
        let mut out = Vec::with_capacity(items.len());
        for it in items {
            let id = (it.key.to_owned(), it.owner);
            let Some(version) = self.local.lock().get(&id).map(|l| l.version) else {
                out.push(false);
                continue;
            };
            let sent = Instant::now();
            self.trips.add();
            let res = sqlx::query(AssertSqlSafe(self.sql.renew.clone()))
                .bind(micros(it.lease))
                .bind(it.key.as_bytes())
                .bind(&owner_bytes(it.owner)[..])
                .bind(version)
                .execute(&self.pool);
            let res = answered_by(self.response_bound(), res).await?;
            let renewed = res.rows_affected() == 1;
            let mut local = self.local.lock();
            match local.get_mut(&id) {
                Some(l) if l.version == version && renewed => {
                    l.until = l.until.max(sent + it.lease);
                    self.waiters.renewed(it.key, it.owner, l.until);
                }
                Some(l) if l.version == version => {
                    // Lost: tell every guard of the hold (nested ones through other lockers
                    // carry their own signals) and forget it; no release will come for it.
                    l.lost(LostReason::NotOwner);
                    local.remove(&id);
                    drop(local);
                    self.waiters.released(it.key, it.owner, true);
                    out.push(renewed);
                    continue;
                }
                _ => {}
            }
            out.push(renewed);
        }
        Ok(out)
    }
}
