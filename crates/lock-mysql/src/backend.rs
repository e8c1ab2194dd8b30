//! [`MySqlLock`]: the backend handle, dispatching to the pessimistic or optimistic recipe.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use lock_core::backend::{
    AcquireRequest, Attempt, Capability, LockBackend, LockInfo, RenewItem, Subscription, unsupported,
};
use lock_core::{LockError, OwnerToken, Result, validate_key, validate_note};
use sqlx::mysql::MySqlPool;

use crate::error::{self, NAME};
use crate::named::Named;
use crate::optimistic::Optimistic;
use crate::options::Mode;
use crate::pessimistic::Pessimistic;
use crate::sql::Flavor;

pub(crate) enum Inner {
    Pessimistic(Pessimistic),
    Optimistic(Optimistic),
    Named(Named),
}

/// MySQL / MariaDB lock backend. Cheap to clone; clones share the pool and the held locks.
#[derive(Clone)]
pub struct MySqlLock {
    pub(crate) inner: Arc<Inner>,
    pub(crate) pool: MySqlPool,
    pub(crate) mode: Mode,
    pub(crate) table: String,
    pub(crate) flavor: Flavor,
    pub(crate) server_version: String,
    /// `mysql://host:port/database/table?mode=...`, without credentials.
    pub(crate) identity: String,
}

impl fmt::Debug for MySqlLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("MySqlLock");
        d.field("mode", &self.mode).field("table", &self.table).field("server", &self.server_version);
        match &*self.inner {
            Inner::Pessimistic(p) => d.field("state", p),
            Inner::Optimistic(o) => d.field("state", o),
            Inner::Named(n) => d.field("state", n),
        };
        d.finish()
    }
}

impl MySqlLock {
    /// Create the tables (and sequence) of this mode if they do not exist
    /// (`sql/*_schema.sql`). Idempotent; when everything exists it sends no DDL at all.
    ///
    /// # Errors
    /// Backend errors (permanent when the user may not create tables);
    /// [`LockError::InvalidConfig`](lock_core::LockError::InvalidConfig) for an optimistic
    /// table of an older version (see
    /// [`MySqlLockBuilder::upgrade_table`](crate::MySqlLockBuilder::upgrade_table)).
    pub async fn migrate(&self) -> Result<()> {
        self.migrate_with(false, true).await
    }

    pub(crate) async fn migrate_with(&self, upgrade: bool, strict: bool) -> Result<()> {
        let fence = format!("{}_fence", self.table);
        // The named mode has the fence object only: ask for it twice.
        let table = if self.mode == Mode::NamedLock { fence.as_str() } else { self.table.as_str() };
        let present: i64 = sqlx::query_scalar(include_str!("../sql/schema_objects_present.sql"))
            .bind(table)
            .bind(&fence)
            .fetch_one(&self.pool)
            .await
            .map_err(error::classify)?;
        // The optimistic schema has no fence object on MySQL.
        let expected = match (self.mode, self.flavor) {
            (Mode::Optimistic, Flavor::MySql) | (Mode::NamedLock, _) => 1,
            _ => 2,
        };
        if present < expected {
            let schema = match &*self.inner {
                Inner::Pessimistic(p) => p.schema().clone(),
                Inner::Optimistic(o) => o.schema().clone(),
                Inner::Named(n) => n.schema().clone(),
            };
            sqlx::raw_sql(sqlx::AssertSqlSafe(schema)).execute(&self.pool).await.map_err(error::classify)?;
        }
        self.check_table_shape(upgrade).await?;
        self.migrate_notes(strict).await
    }

    /// Create the notes table (`sql/notes_schema.sql`) unless it exists. Not `strict` (at
    /// build): a user that may lock but not create tables still builds where an older version
    /// did; its notes then answer with the server's error until the table is made for it.
    async fn migrate_notes(&self, strict: bool) -> Result<()> {
        let notes = format!("{}_notes", self.table);
        let present: i64 = sqlx::query_scalar(include_str!("../sql/schema_objects_present.sql"))
            .bind(&notes)
            .bind(&notes)
            .fetch_one(&self.pool)
            .await
            .map_err(error::classify)?;
        if present > 0 {
            return Ok(());
        }
        let schema = match &*self.inner {
            Inner::Pessimistic(p) => p.notes_schema(),
            Inner::Optimistic(o) => o.notes_schema(),
            Inner::Named(n) => n.notes_schema(),
        };
        match sqlx::raw_sql(sqlx::AssertSqlSafe(schema)).execute(&self.pool).await.map_err(error::classify) {
            Err(LockError::PermissionDenied { .. }) if !strict => {
                tracing::warn!(table = %notes, "may not create the notes table: set_note/note fail until it exists");
                Ok(())
            }
            other => other.map(drop),
        }
    }

    /// Optimistic mode: refuse (or, with `upgrade`, upgrade) a lease table of an older version.
    pub(crate) async fn check_table_shape(&self, upgrade: bool) -> Result<()> {
        match &*self.inner {
            Inner::Optimistic(o) => o.check_shape(&self.table, upgrade).await,
            Inner::Pessimistic(_) | Inner::Named(_) => Ok(()),
        }
    }

    /// The mode.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The lock table.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// The pool this backend uses.
    pub fn pool(&self) -> &MySqlPool {
        &self.pool
    }

    /// `SELECT VERSION()` of the server, as seen at build time.
    pub fn server_version(&self) -> &str {
        &self.server_version
    }

    /// Whether the server is MariaDB (else MySQL): MariaDB ends lock waits with
    /// `max_statement_time`, MySQL with `MAX_EXECUTION_TIME`.
    pub fn is_mariadb(&self) -> bool {
        self.flavor == Flavor::MariaDb
    }

    /// Pessimistic and named modes: the server's id (`CONNECTION_ID()`) of the connection
    /// holding `key` for this backend, for fault injection in tests (`KILL CONNECTION <id>`).
    /// `None` if `key` is not held here, or in optimistic mode.
    ///
    /// Only with the `testing` feature, which is for this crate's and the workspace's tests,
    /// not for production: the id lets anyone with `PROCESS` or `SUPER` end the hold.
    #[cfg(feature = "testing")]
    pub fn held_connection_id(&self, key: &str) -> Option<u64> {
        match &*self.inner {
            Inner::Pessimistic(p) => p.held_connection_id(key),
            Inner::Named(n) => n.held_connection_id(key),
            Inner::Optimistic(_) => None,
        }
    }

    /// Requests this backend sent and waited on the server's answer for (a batch sent as one
    /// counts once), background tasks included: the cost of an acquisition or release as a
    /// count, which tests can assert (durations they cannot). Only with the `testing` feature.
    #[cfg(feature = "testing")]
    pub fn round_trips(&self) -> u64 {
        match &*self.inner {
            Inner::Pessimistic(p) => p.trips().get(),
            Inner::Optimistic(o) => o.trips().get(),
            Inner::Named(n) => n.trips().get(),
        }
    }
}

#[async_trait]
impl LockBackend for MySqlLock {
    fn name(&self) -> &'static str {
        NAME
    }

    fn identity(&self) -> String {
        self.identity.clone()
    }

    fn capabilities(&self) -> Capability {
        // Not failover_safe: replicas apply the binlog asynchronously, so a promoted replica can
        // miss the latest grants (and its sequence can lag): see the README.
        let mut c = Capability::NONE;
        c.renew = true;
        c.fencing = true;
        c.reentrant = true;
        c.notes = true;
        if matches!(self.mode, Mode::Pessimistic | Mode::NamedLock) {
            // Waiters queue in the server (row lock or GET_LOCK), in no promised order.
            c.native_wait = true;
            c.session_bound = true;
        } else {
            // Releases in this process wake the head of this process's queue for the key (the
            // queue is kept here, not on the server: see `waiters.rs`).
            c.notify = true;
            c.queue = true;
        }
        c
    }

    async fn try_acquire(&self, req: &AcquireRequest<'_>) -> Result<Attempt> {
        // The core validates keys already; this guards direct callers. A longer key would be
        // truncated to VARBINARY(255) by INSERT IGNORE and alias another key.
        validate_key(req.key)?;
        match &*self.inner {
            Inner::Pessimistic(p) => p.try_acquire(req).await,
            Inner::Optimistic(o) => o.try_acquire(req).await,
            Inner::Named(n) => n.try_acquire(req).await,
        }
    }

    async fn release(&self, key: &str, owner: OwnerToken) -> Result<bool> {
        match &*self.inner {
            Inner::Pessimistic(p) => p.release(key, owner).await,
            Inner::Optimistic(o) => o.release(key, owner).await,
            Inner::Named(n) => n.release(key, owner).await,
        }
    }

    async fn renew(&self, items: &[RenewItem<'_>]) -> Result<Vec<bool>> {
        match &*self.inner {
            Inner::Pessimistic(p) => p.renew(items).await,
            Inner::Optimistic(o) => o.renew(items).await,
            Inner::Named(n) => n.renew(items).await,
        }
    }

    async fn inspect(&self, key: &str) -> Result<LockInfo> {
        match &*self.inner {
            // A row lock is not visible without taking it (or waiting behind it): say so.
            Inner::Pessimistic(_) => Err(unsupported(
                NAME,
                "inspecting a pessimistic lock without taking the row (use optimistic mode, or try_lock)",
            )),
            Inner::Optimistic(o) => o.inspect(key).await,
            Inner::Named(n) => n.inspect(key).await,
        }
    }

    // Unsupported: the fence is the store's own (a revision, a sequence, a counter row); only
    // a quorum over Redis members needs to raise it.
    async fn raise_fence(
        &self,
        _key: &str,
        _owner: OwnerToken,
        _floor: lock_core::FencingToken,
    ) -> Result<bool> {
        Err(lock_core::backend::unsupported(self.name(), "raising the fence counter"))
    }

    async fn leave_queue(&self, key: &str, owner: OwnerToken) -> Result<()> {
        match &*self.inner {
            // A pessimistic waiter's place in the server's lock queue ends with its statement.
            Inner::Pessimistic(_) | Inner::Named(_) => {}
            Inner::Optimistic(o) => o.leave_queue(key, owner),
        }
        Ok(())
    }

    async fn subscribe(&self, key: &str) -> Result<Option<Subscription>> {
        Ok(match &*self.inner {
            Inner::Pessimistic(_) | Inner::Named(_) => None,
            Inner::Optimistic(o) => Some(o.subscribe(key)),
        })
    }

    async fn set_note(&self, key: &str, owner: OwnerToken, note: &str) -> Result<bool> {
        // The core validates both; this guards direct callers (a longer note would not fit).
        validate_key(key)?;
        validate_note(note)?;
        match &*self.inner {
            Inner::Pessimistic(p) => p.set_note(key, owner, note).await,
            Inner::Optimistic(o) => o.set_note(key, owner, note).await,
            Inner::Named(n) => n.set_note(key, owner, note).await,
        }
    }

    async fn note(&self, key: &str) -> Result<Option<String>> {
        validate_key(key)?;
        match &*self.inner {
            Inner::Pessimistic(p) => p.note(key).await,
            Inner::Optimistic(o) => o.note(key).await,
            Inner::Named(n) => n.note(key).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn public_types_are_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<MySqlLock>();
        check::<crate::MySqlLockBuilder>();
    }
}
