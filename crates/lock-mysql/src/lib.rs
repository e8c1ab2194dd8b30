#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![warn(missing_debug_implementations)]

mod builder;
mod business;
mod error;
mod optimistic;
mod pessimistic;
mod sql;

use std::fmt;
use std::sync::Arc;

use lock_core::{
    AcquireRequest, Attempt, Capability, LockBackend, OwnerToken, RenewItem, Result, Subscription,
    async_trait, validate_key,
};
use sqlx::mysql::MySqlPool;

pub use builder::{
    DEFAULT_ACQUIRE_TIMEOUT, DEFAULT_KEEPALIVE, DEFAULT_MAX_CONNECTIONS, DEFAULT_OPTIMISTIC_TABLE,
    DEFAULT_PESSIMISTIC_TABLE, MySqlLockBuilder,
};
pub use business::decrement_stock_cas;
pub use sql::{MAX_TABLE_NAME, validate_table_name};
/// The driver, re-exported so callers build pools and downcast error sources with one version.
pub use sqlx;

use optimistic::Optimistic;
use pessimistic::Pessimistic;

/// How locks are kept.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Mode {
    /// A row locked with `SELECT ... FOR UPDATE` by a transaction held open on a dedicated
    /// connection ("数据库悲观锁"). Session-bound: the lock lives exactly as long as the
    /// connection; waiters queue in the server.
    #[default]
    Pessimistic,
    /// A lease row taken by a conditional `UPDATE` judged by the database clock, with a version
    /// that is the fencing token ("数据库乐观锁"). Time-bound: expires unless renewed; waiters
    /// poll.
    Optimistic,
}

/// Which server dialect is on the other end (decides the statement-timeout syntax).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Flavor {
    MariaDb,
    MySql,
}

pub(crate) enum Inner {
    Pessimistic(Pessimistic),
    Optimistic(Optimistic),
}

/// MySQL / MariaDB lock backend. Cheap to clone; clones share the pool and the held locks.
#[derive(Clone)]
pub struct MySqlLock {
    inner: Arc<Inner>,
    pool: MySqlPool,
    mode: Mode,
    table: String,
    flavor: Flavor,
    server_version: String,
    /// `mysql://host:port/database?table=...`, without credentials.
    identity: String,
}

impl fmt::Debug for MySqlLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("MySqlLock");
        d.field("mode", &self.mode).field("table", &self.table).field("server", &self.server_version);
        match &*self.inner {
            Inner::Pessimistic(p) => d.field("state", p),
            Inner::Optimistic(o) => d.field("state", o),
        };
        d.finish()
    }
}

impl MySqlLock {
    /// Start building: `MySqlLock::builder().url("mysql://...").mode(Mode::Optimistic).build().await`.
    pub fn builder() -> MySqlLockBuilder {
        MySqlLockBuilder::default()
    }

    /// A pessimistic lock backend on `url` with default settings.
    ///
    /// # Errors
    /// As [`MySqlLockBuilder::build`].
    pub async fn from_url(url: &str) -> Result<Self> {
        Self::builder().url(url).build().await
    }

    /// Create the tables (and sequence) of this mode if they do not exist
    /// (`sql/*_schema.sql`). Idempotent; when everything exists it sends no DDL at all.
    ///
    /// # Errors
    /// Backend errors (permanent when the user may not create tables);
    /// [`LockError::InvalidConfig`](lock_core::LockError::InvalidConfig) for an optimistic
    /// table of an older version (see [`MySqlLockBuilder::upgrade_table`]).
    pub async fn migrate(&self) -> Result<()> {
        self.migrate_with(false).await
    }

    pub(crate) async fn migrate_with(&self, upgrade: bool) -> Result<()> {
        let present: i64 = sqlx::query_scalar(include_str!("../sql/schema_objects_present.sql"))
            .bind(&self.table)
            .bind(format!("{}_fence", self.table))
            .fetch_one(&self.pool)
            .await
            .map_err(error::classify)?;
        // The optimistic schema has no fence object on MySQL.
        let expected = if self.mode == Mode::Optimistic && self.flavor == Flavor::MySql { 1 } else { 2 };
        if present < expected {
            let schema = match &*self.inner {
                Inner::Pessimistic(p) => p.schema().clone(),
                Inner::Optimistic(o) => o.schema().clone(),
            };
            sqlx::raw_sql(sqlx::AssertSqlSafe(schema)).execute(&self.pool).await.map_err(error::classify)?;
        }
        self.check_table_shape(upgrade).await
    }

    /// Optimistic mode: refuse (or, with `upgrade`, upgrade) a lease table of an older version.
    pub(crate) async fn check_table_shape(&self, upgrade: bool) -> Result<()> {
        match &*self.inner {
            Inner::Optimistic(o) => o.check_shape(&self.table, upgrade).await,
            Inner::Pessimistic(_) => Ok(()),
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

    /// Pessimistic mode: the server's id (`CONNECTION_ID()`) of the connection holding `key`
    /// for this backend, for diagnostics and fault injection (`KILL CONNECTION <id>`). `None`
    /// if `key` is not held here, or in optimistic mode.
    pub fn held_connection_id(&self, key: &str) -> Option<u64> {
        match &*self.inner {
            Inner::Pessimistic(p) => p.held_connection_id(key),
            Inner::Optimistic(_) => None,
        }
    }
}

#[async_trait]
impl LockBackend for MySqlLock {
    fn name(&self) -> &'static str {
        error::NAME
    }

    fn identity(&self) -> String {
        self.identity.clone()
    }

    fn capabilities(&self) -> Capability {
        // Not failover_safe: replicas apply the binlog asynchronously, so a promoted replica can
        // miss the latest grants (and its sequence can lag): see the README.
        let mut c = Capability::NONE;
        c.failover_safe = false;
        c.renew = true;
        c.fencing = true;
        c.reentrant = true;
        if self.mode == Mode::Pessimistic {
            c.native_wait = true;
            c.session_bound = true;
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
        }
    }

    async fn release(&self, key: &str, owner: OwnerToken) -> Result<bool> {
        match &*self.inner {
            Inner::Pessimistic(p) => p.release(key, owner).await,
            Inner::Optimistic(o) => o.release(key, owner).await,
        }
    }

    async fn renew(&self, items: &[RenewItem<'_>]) -> Result<Vec<bool>> {
        match &*self.inner {
            Inner::Pessimistic(p) => p.renew(items).await,
            Inner::Optimistic(o) => o.renew(items).await,
        }
    }

    async fn inspect(&self, key: &str) -> Result<lock_core::LockInfo> {
        match &*self.inner {
            // A row lock is not visible without taking it (or waiting behind it): say so.
            Inner::Pessimistic(_) => Err(lock_core::LockError::Unsupported {
                backend: error::NAME,
                what: "inspecting a pessimistic lock without taking the row (use optimistic mode, or try_lock)",
            }),
            Inner::Optimistic(o) => o.inspect(key).await,
        }
    }

    async fn leave_queue(&self, _key: &str, _owner: OwnerToken) -> Result<()> {
        Ok(())
    }

    async fn subscribe(&self, _key: &str) -> Result<Option<Subscription>> {
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn public_types_are_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<MySqlLock>();
        check::<MySqlLockBuilder>();
    }
}
