//! A granted hold: release, renewal, inspection and notes, each a compare-and-set or read
//! judged by the database clock.

use std::sync::Arc;
use std::time::Duration;

use lock_core::backend::{LockInfo, RenewItem};
use lock_core::{FencingToken, LostReason, OwnerToken, Result};
use sqlx::AssertSqlSafe;
use tokio::time::Instant;

use super::{Optimistic, micros, owner_bytes};
use crate::session::answered_by;

impl Optimistic {
    pub(crate) async fn release_lease(&self, key: &str, owner: OwnerToken) -> Result<bool> {
        let id = (key.to_owned(), owner);
        let Some(version) = self.local.lock().get(&id).map(|l| l.version) else {
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
        // The row stays (the sweep deletes it once idle): see `sql/optimistic_sweep.sql`.
        let released = cas(&self.sql.release).await?.rows_affected() == 1;
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
    pub(crate) async fn inspect_lease(&self, key: &str) -> Result<LockInfo> {
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

    /// Force-unlock: ends the live lease of `key` whose version is `fence` (`sql/
    /// optimistic_evict.sql`). Its holder's next renewal finds the row changed; waiters in this
    /// process are woken, others find the row free at their next poll.
    pub(crate) async fn evict_lease(&self, key: &str, fence: FencingToken) -> Result<bool> {
        self.trips.add();
        let ended = answered_by(
            self.response_bound(),
            sqlx::query(AssertSqlSafe(self.sql.evict.clone()))
                .bind(key.as_bytes())
                .bind(fence.0)
                .execute(&self.pool),
        )
        .await?
        .rows_affected()
            == 1;
        if ended {
            self.waiters.evicted(key);
        }
        Ok(ended)
    }

    /// Store `note` with `owner`'s live hold of `key`, judged by the database clock in the same
    /// autocommit statement (`sql/notes_optimistic_set.sql`). One round trip. A dropped future
    /// may leave the statement to run later: it then stores the note with the hold live at that
    /// moment, or nothing (a row naming an ended hold is never read back).
    pub(crate) async fn set_lease_note(&self, key: &str, owner: OwnerToken, note: &str) -> Result<bool> {
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
    pub(crate) async fn lease_note(&self, key: &str) -> Result<Option<String>> {
        self.trips.add();
        let read = sqlx::query(AssertSqlSafe(self.sql.notes.optimistic_read.clone()))
            .bind(key.as_bytes())
            .fetch_optional(&self.pool);
        let row = answered_by(self.response_bound(), read).await?;
        crate::session::note_of(row.as_ref())
    }

    pub(crate) async fn renew_leases(&self, items: &[RenewItem<'_>]) -> Result<Vec<bool>> {
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
