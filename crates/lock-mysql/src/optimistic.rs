//! Optimistic mode: a lease row taken and released by compare-and-set statements judged by the
//! database clock; `version` is the fencing token.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use lock_core::{AcquireRequest, Attempt, FencingToken, Grant, LockInfo, OwnerToken, RenewItem, Result};
use sqlx::mysql::{MySqlConnection, MySqlPool};
use sqlx::pool::PoolConnection;
use sqlx::{AssertSqlSafe, MySql};

use crate::error::classify;
use crate::sql::OptimisticSql;

/// One acquisition attempt's connection. Every statement of the attempt goes through it; if the
/// attempt's future is dropped, the cleanup (`optimistic_cancel.sql`, by the attempt's nonce)
/// is sent on this same connection, so it runs after any statement still buffered there. A
/// cleanup on another connection could run first and miss a grant that lands later.
struct AttemptConn {
    conn: Option<PoolConnection<MySql>>,
    pool: MySqlPool,
    cancel: Arc<str>,
    key: Vec<u8>,
    nonce: [u8; 16],
    armed: bool,
}

impl AttemptConn {
    fn conn(&mut self) -> &mut MySqlConnection {
        match self.conn.as_mut() {
            Some(c) => c,
            None => unreachable!("the connection is only taken on drop"),
        }
    }
}

impl Drop for AttemptConn {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let Some(mut conn) = self.conn.take() else { return };
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            // No runtime: closing the socket is all we can do; the lease frees the key.
            conn.close_on_drop();
            return;
        };
        let (pool, sql, key, nonce) =
            (self.pool.clone(), self.cancel.clone(), std::mem::take(&mut self.key), self.nonce);
        rt.spawn(async move {
            let first = sqlx::query(AssertSqlSafe(sql.clone()))
                .bind(key.clone())
                .bind(nonce.to_vec())
                .execute(&mut *conn)
                .await;
            if let Err(e) = first {
                // A broken connection either sent the attempt or never will: undo it anywhere.
                conn.close_on_drop();
                let res = match pool.acquire().await {
                    Ok(mut c) => sqlx::query(AssertSqlSafe(sql))
                        .bind(key)
                        .bind(nonce.to_vec())
                        .execute(&mut *c)
                        .await
                        .map(drop),
                    Err(e2) => Err(e2),
                };
                if let Err(e2) = res {
                    tracing::debug!(error = %e, retry = %e2, "cleanup of a cancelled acquisition failed; the lease will free it");
                }
            }
        });
    }
}

/// What this client holds: the version it acquired (CAS operand) and its nesting depth.
#[derive(Debug, Clone, Copy)]
struct Local {
    version: u64,
    count: u32,
}

type LocalMap = HashMap<(String, OwnerToken), Local>;

/// Rows of unused keys are swept (MariaDB) once every this many acquisitions of a client.
const SWEEP_EVERY: u64 = 1024;

/// The optimistic backend state.
pub(crate) struct Optimistic {
    pool: MySqlPool,
    sql: OptimisticSql,
    local: Mutex<LocalMap>,
    /// MariaDB: fences come from a sequence, so rows of unused keys may be deleted.
    reclaim: bool,
    acquisitions: std::sync::atomic::AtomicU64,
}

impl fmt::Debug for Optimistic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Optimistic").field("held", &self.local().len()).finish()
    }
}

fn owner_bytes(owner: OwnerToken) -> [u8; 16] {
    owner.as_u128().to_be_bytes()
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

impl Optimistic {
    pub(crate) fn new(pool: MySqlPool, sql: OptimisticSql, reclaim: bool) -> Self {
        Optimistic { pool, sql, local: Mutex::default(), reclaim, acquisitions: Default::default() }
    }

    pub(crate) fn schema(&self) -> &Arc<str> {
        &self.sql.schema
    }

    /// Bring a table created by an older version up to date (the `attempt` column).
    pub(crate) async fn migrate(&self, table: &str) -> Result<()> {
        let has: i64 = sqlx::query_scalar(include_str!("../sql/optimistic_has_attempt.sql"))
            .bind(table)
            .fetch_one(&self.pool)
            .await
            .map_err(classify)?;
        if has == 0 {
            sqlx::query(AssertSqlSafe(self.sql.migrate_attempt.clone()))
                .execute(&self.pool)
                .await
                .map_err(classify)?;
        }
        Ok(())
    }

    fn local(&self) -> MutexGuard<'_, LocalMap> {
        // Single-operation critical sections: a poisoned map is still consistent.
        self.local.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn acquired(&self, key: &str, owner: OwnerToken, version: u64, nested: bool, lease: Duration) -> Attempt {
        let mut local = self.local();
        let e = local.entry((key.to_owned(), owner)).or_insert(Local { version, count: 0 });
        if !nested || e.version != version {
            *e = Local { version, count: 0 };
        }
        e.count += 1;
        Attempt::Acquired(Grant { fence: FencingToken(version), lease: Some(lease) })
    }

    pub(crate) async fn try_acquire(&self, req: &AcquireRequest<'_>) -> Result<Attempt> {
        let key = req.key.as_bytes();
        let owner = owner_bytes(req.owner);
        let lease = micros(req.lease);
        let nonce = OwnerToken::random().as_u128().to_be_bytes();
        let conn = self.pool.acquire().await.map_err(classify)?;
        let mut attempt = AttemptConn {
            conn: Some(conn),
            pool: self.pool.clone(),
            cancel: self.sql.cancel.clone(),
            key: key.to_vec(),
            nonce,
            armed: true,
        };
        let out = self.attempt(req, attempt.conn(), key, owner, nonce, lease).await;
        // A definite answer (acquired, held, or a statement the server refused) needs no undo;
        // a broken connection leaves the outcome open, so the undo stays armed.
        attempt.armed = matches!(&out, Err(e) if e.is_temporary());
        if out.is_ok()
            && self.reclaim
            && self.acquisitions.fetch_add(1, Ordering::Relaxed) % SWEEP_EVERY == SWEEP_EVERY - 1
        {
            let (pool, sql) = (self.pool.clone(), self.sql.sweep.clone());
            tokio::spawn(async move {
                if let Err(e) = sqlx::query(AssertSqlSafe(sql)).execute(&pool).await {
                    tracing::debug!(error = %e, "sweeping unused lock rows failed");
                }
            });
        }
        out
    }

    async fn attempt(
        &self,
        req: &AcquireRequest<'_>,
        conn: &mut MySqlConnection,
        key: &[u8],
        owner: [u8; 16],
        nonce: [u8; 16],
        lease: u64,
    ) -> Result<Attempt> {
        // A lost race with an expiring or just-freed row is retried a couple of times.
        for _ in 0..3 {
            let took = sqlx::query(AssertSqlSafe(self.sql.take.clone()))
                .bind(&owner[..])
                .bind(&nonce[..])
                .bind(lease)
                .bind(key)
                .execute(&mut *conn)
                .await
                .map_err(classify)?;
            if took.rows_affected() == 1 {
                return Ok(self.acquired(req.key, req.owner, took.last_insert_id(), false, req.lease));
            }
            let row: Option<(Option<Vec<u8>>, u64, Option<i64>)> =
                sqlx::query_as(AssertSqlSafe(self.sql.probe.clone()))
                    .bind(key)
                    .fetch_optional(&mut *conn)
                    .await
                    .map_err(classify)?;
            match row {
                None => {
                    let ins = sqlx::query(AssertSqlSafe(self.sql.insert.clone()))
                        .bind(key)
                        .bind(&owner[..])
                        .bind(lease)
                        .bind(&nonce[..])
                        .execute(&mut *conn)
                        .await
                        .map_err(classify)?;
                    if ins.rows_affected() == 1 {
                        return Ok(self.acquired(req.key, req.owner, ins.last_insert_id(), false, req.lease));
                    }
                }
                Some((Some(holder), version, Some(left))) if left > 0 => {
                    if holder[..] != owner[..] {
                        let left = Duration::from_micros(left.unsigned_abs());
                        return Ok(Attempt::Held { retry_after: Some(left) });
                    }
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
                        return Ok(self.acquired(req.key, req.owner, version, true, req.lease));
                    }
                }
                // Free or expired by now: take it on the next round.
                Some(_) => {}
            }
        }
        Ok(Attempt::Held { retry_after: None })
    }

    pub(crate) async fn release(&self, key: &str, owner: OwnerToken) -> Result<bool> {
        let Some(held) = self.local().get(&(key.to_owned(), owner)).copied() else { return Ok(false) };
        let cas = |sql: &Arc<str>| {
            sqlx::query(AssertSqlSafe(sql.clone()))
                .bind(key.as_bytes())
                .bind(owner_bytes(owner).to_vec())
                .bind(held.version)
                .execute(&self.pool)
        };
        // The last hold on MariaDB deletes the row (per-key state does not pile up); a row with
        // more holds than this client knows of (a cancelled nesting) falls back to the update.
        let deleted = self.reclaim
            && held.count == 1
            && cas(&self.sql.release_delete).await.map_err(classify)?.rows_affected() == 1;
        let released = deleted || cas(&self.sql.release).await.map_err(classify)?.rows_affected() == 1;
        let mut local = self.local();
        let id = (key.to_owned(), owner);
        match local.get_mut(&id) {
            Some(l) if released && l.count > 1 => l.count -= 1,
            _ => {
                local.remove(&id);
            }
        }
        Ok(released)
    }

    /// The row as it stands: held while `owner` is set and the lease runs by the DB clock.
    pub(crate) async fn inspect(&self, key: &str) -> Result<LockInfo> {
        let row: Option<(Option<Vec<u8>>, u64, Option<i64>)> =
            sqlx::query_as(AssertSqlSafe(self.sql.probe.clone()))
                .bind(key.as_bytes())
                .fetch_optional(&self.pool)
                .await
                .map_err(classify)?;
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

    pub(crate) async fn renew(&self, items: &[RenewItem<'_>]) -> Result<Vec<bool>> {
        let mut out = Vec::with_capacity(items.len());
        for it in items {
            let Some(held) = self.local().get(&(it.key.to_owned(), it.owner)).copied() else {
                out.push(false);
                continue;
            };
            let res = sqlx::query(AssertSqlSafe(self.sql.renew.clone()))
                .bind(micros(it.lease))
                .bind(it.key.as_bytes())
                .bind(&owner_bytes(it.owner)[..])
                .bind(held.version)
                .execute(&self.pool)
                .await
                .map_err(classify)?;
            out.push(res.rows_affected() == 1);
        }
        Ok(out)
    }
}
