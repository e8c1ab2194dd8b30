//! Optimistic mode: a lease row taken and released by compare-and-set statements judged by the
//! database clock; `version` is the fencing token.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use lock_core::{AcquireRequest, Attempt, FencingToken, Grant, OwnerToken, RenewItem, Result};
use sqlx::AssertSqlSafe;
use sqlx::mysql::MySqlPool;

use crate::error::classify;
use crate::sql::OptimisticSql;

/// Frees a row taken by a cancelled acquisition (see `optimistic_cancel.sql`).
struct CancelCleanup {
    pool: MySqlPool,
    sql: Arc<str>,
    key: Vec<u8>,
    owner: [u8; 16],
    armed: bool,
}

impl Drop for CancelCleanup {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else { return };
        let (pool, sql, key, owner) =
            (self.pool.clone(), self.sql.clone(), std::mem::take(&mut self.key), self.owner);
        rt.spawn(async move {
            let res = sqlx::query(AssertSqlSafe(sql)).bind(key).bind(&owner[..]).execute(&pool).await;
            if let Err(e) = res {
                tracing::debug!(error = %e, "cleanup of a cancelled acquisition failed; the lease will free it");
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

/// The optimistic backend state.
pub(crate) struct Optimistic {
    pool: MySqlPool,
    sql: OptimisticSql,
    local: Mutex<LocalMap>,
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
    pub(crate) fn new(pool: MySqlPool, sql: OptimisticSql) -> Self {
        Optimistic { pool, sql, local: Mutex::default() }
    }

    pub(crate) fn schema(&self) -> &Arc<str> {
        &self.sql.schema
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
        // Armed before anything is sent: if this future is dropped mid-statement, a row taken by
        // it is freed in the background instead of staying locked for the whole lease.
        let already_held = self.local().contains_key(&(req.key.to_owned(), req.owner));
        let mut cleanup = CancelCleanup {
            pool: self.pool.clone(),
            sql: self.sql.cancel.clone(),
            key: key.to_vec(),
            owner,
            armed: !already_held,
        };
        let out = self.attempt(req, key, owner, lease).await;
        cleanup.armed = false;
        out
    }

    async fn attempt(
        &self,
        req: &AcquireRequest<'_>,
        key: &[u8],
        owner: [u8; 16],
        lease: u64,
    ) -> Result<Attempt> {
        // A lost race with an expiring or just-freed row is retried a couple of times.
        for _ in 0..3 {
            let took = sqlx::query(AssertSqlSafe(self.sql.take.clone()))
                .bind(&owner[..])
                .bind(lease)
                .bind(key)
                .execute(&self.pool)
                .await
                .map_err(classify)?;
            if took.rows_affected() == 1 {
                return Ok(self.acquired(req.key, req.owner, took.last_insert_id(), false, req.lease));
            }
            let row: Option<(Option<Vec<u8>>, u64, Option<i64>)> =
                sqlx::query_as(AssertSqlSafe(self.sql.probe.clone()))
                    .bind(key)
                    .fetch_optional(&self.pool)
                    .await
                    .map_err(classify)?;
            match row {
                None => {
                    let ins = sqlx::query(AssertSqlSafe(self.sql.insert.clone()))
                        .bind(key)
                        .bind(&owner[..])
                        .bind(lease)
                        .execute(&self.pool)
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
                        .bind(lease)
                        .bind(key)
                        .bind(&owner[..])
                        .bind(version)
                        .execute(&self.pool)
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
        let res = sqlx::query(AssertSqlSafe(self.sql.release.clone()))
            .bind(key.as_bytes())
            .bind(&owner_bytes(owner)[..])
            .bind(held.version)
            .execute(&self.pool)
            .await
            .map_err(classify)?;
        let released = res.rows_affected() == 1;
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
