//! [`MySqlLock`]: the backend handle, forwarding to the backend of its mode.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use lock_core::backend::{AcquireRequest, Attempt, Capability, LockBackend, LockInfo, RenewItem};
use lock_core::{FencingToken, LockError, OwnerToken, Result, validate_key, validate_note};
use sqlx::mysql::MySqlPool;

use crate::error::{self, NAME};
use crate::mode::ModeBackend;
use crate::options::Mode;
use crate::sql::Flavor;
use lock_core::backend::{Admin, Notes, Notify, RaiseFence, Records, WaitQueue};

/// MySQL / MariaDB lock backend. Cheap to clone; clones share the pool and the held locks.
#[derive(Clone)]
pub struct MySqlLock {
    /// The mode's own backend: pessimistic and named through the session toolkit, optimistic
    /// through its lease table.
    pub(crate) inner: Arc<dyn ModeBackend>,
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
        f.debug_struct("MySqlLock")
            .field("mode", &self.mode)
            .field("table", &self.table)
            .field("server", &self.server_version)
            .field("state", &self.inner)
            .finish()
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
            sqlx::raw_sql(sqlx::AssertSqlSafe(self.inner.schema()))
                .execute(&self.pool)
                .await
                .map_err(error::classify)?;
        }
        self.check_table_shape(upgrade).await?;
        self.migrate_notes(strict).await?;
        self.migrate_records(strict).await
    }

    /// Create the notes table (`sql/notes_schema.sql`) unless it exists. Not `strict` (at
    /// build): a user that may lock but not create tables still builds where an older version
    /// did; its notes then answer with the server's error until the table is made for it.
    async fn migrate_notes(&self, strict: bool) -> Result<()> {
        let why = "may not create the notes table: set_note/note fail until it exists";
        self.create_side_table(&format!("{}_notes", self.table), &self.inner.notes_schema(), strict, why)
            .await
    }

    /// Create `table` with `schema` unless it exists; not `strict`, a refusal is logged with
    /// `why` and the build goes on.
    pub(crate) async fn create_side_table(
        &self,
        table: &str,
        schema: &str,
        strict: bool,
        why: &'static str,
    ) -> Result<()> {
        let present: i64 = sqlx::query_scalar(include_str!("../sql/schema_objects_present.sql"))
            .bind(table)
            .bind(table)
            .fetch_one(&self.pool)
            .await
            .map_err(error::classify)?;
        if present > 0 {
            return Ok(());
        }
        match sqlx::raw_sql(sqlx::AssertSqlSafe(schema.to_owned()))
            .execute(&self.pool)
            .await
            .map_err(error::classify)
        {
            Err(LockError::PermissionDenied { .. }) if !strict => {
                tracing::warn!(%table, "{why}");
                Ok(())
            }
            other => other.map(drop),
        }
    }

    /// Optimistic mode: refuse (or, with `upgrade`, upgrade) a lease table of an older version.
    pub(crate) async fn check_table_shape(&self, upgrade: bool) -> Result<()> {
        self.inner.check_shape(&self.table, upgrade).await
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
        self.inner.held_connection_id(key)
    }

    /// Requests this backend sent and waited on the server's answer for (a batch sent as one
    /// counts once), background tasks included: the cost of an acquisition or release as a
    /// count, which tests can assert (durations they cannot). Only with the `testing` feature.
    #[cfg(feature = "testing")]
    pub fn round_trips(&self) -> u64 {
        self.inner.round_trips()
    }
}

impl MySqlLock {
    /// The mode's backend, as any backend (its capabilities' calls through `dyn LockBackend`).
    fn store(&self) -> &dyn LockBackend {
        &*self.inner
    }
}

// Every step is the mode's; the handle adds the checks that guard direct callers.
#[async_trait]
impl LockBackend for MySqlLock {
    fn name(&self) -> &'static str {
        NAME
    }

    fn identity(&self) -> String {
        self.identity.clone()
    }

    fn capabilities(&self) -> Capability {
        // Not failover_safe in any mode: replicas apply the binlog asynchronously, so a
        // promoted replica can miss the latest grants (and its sequence can lag): see the README.
        self.inner.capabilities()
    }

    async fn try_acquire(&self, req: &AcquireRequest<'_>) -> Result<Attempt> {
        // The core validates keys already; this guards direct callers. A longer key would be
        // truncated to VARBINARY(255) by INSERT IGNORE and alias another key.
        validate_key(req.key)?;
        self.inner.try_acquire(req).await
    }

    async fn release(&self, key: &str, owner: OwnerToken) -> Result<bool> {
        self.inner.release(key, owner).await
    }

    async fn renew(&self, items: &[RenewItem<'_>]) -> Result<Vec<bool>> {
        self.inner.renew(items).await
    }

    async fn inspect(&self, key: &str) -> Result<LockInfo> {
        self.inner.inspect(key).await
    }

    fn notify(&self) -> Option<&dyn Notify> {
        self.inner.notify()
    }

    fn queue(&self) -> Option<&dyn WaitQueue> {
        self.inner.queue()
    }

    fn notes(&self) -> Option<&dyn Notes> {
        self.inner.notes().map(|_| self as &dyn Notes)
    }

    fn fences(&self) -> Option<&dyn RaiseFence> {
        self.inner.fences()
    }

    // The table `<table>_recs`, the same in every mode (records.rs).
    lock_core::backend::hand_out!(records);

    fn admin(&self) -> Option<&dyn Admin> {
        self.inner.admin().map(|_| self as &dyn Admin)
    }
}

#[async_trait]
impl Notes for MySqlLock {
    async fn set_note(&self, key: &str, owner: OwnerToken, note: &str) -> Result<bool> {
        // The core validates both; this guards direct callers (a longer note would not fit).
        validate_key(key)?;
        validate_note(note)?;
        self.store().set_note(key, owner, note).await
    }

    async fn note(&self, key: &str) -> Result<Option<String>> {
        validate_key(key)?;
        self.store().note(key).await
    }
}

#[async_trait]
impl Records for MySqlLock {
    async fn record(
        &self,
        key: &str,
        op: lock_core::backend::RecordOp<'_>,
    ) -> Result<lock_core::backend::Record> {
        validate_key(key)?;
        self.record_op(key, op).await
    }
}

#[async_trait]
impl Admin for MySqlLock {
    async fn list(&self, prefix: &str, limit: usize) -> Result<Vec<String>> {
        self.store().list(prefix, limit).await
    }

    async fn evict(&self, key: &str, fence: FencingToken) -> Result<bool> {
        validate_key(key)?;
        self.store().evict(key, fence).await
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
