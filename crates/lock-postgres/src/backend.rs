//! [`PgLock`]: the backend handle.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use lock_core::backend::{
    AcquireRequest, Attempt, Capability, LockBackend, LockInfo, Record, RecordOp, RenewItem, session,
};
use lock_core::{FencingToken, LockError, OwnerToken, Result, validate_key, validate_note};
use sqlx::AssertSqlSafe;
use sqlx::postgres::{PgConnection, PgPool};

use crate::error::{NAME, classify};
use crate::session::Advisory;
use crate::sql::Sql;
use lock_core::backend::{Admin, Notes, Records};

/// PostgreSQL lock backend: session advisory locks, fencing tokens from a counter table. Cheap
/// to clone; clones share the pool and the held locks.
#[derive(Clone)]
pub struct PgLock {
    pub(crate) sessions: Arc<Advisory>,
    pub(crate) pool: PgPool,
    pub(crate) table: String,
    /// `postgres://host:port/database?table=...`, without credentials.
    pub(crate) identity: String,
}

impl fmt::Debug for PgLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgLock").field("identity", &self.identity).field("state", &*self.sessions).finish()
    }
}

impl PgLock {
    /// Create the fence table if it does not exist (`sql/schema.sql`), or add the note columns
    /// to a fence table of an older version (`sql/notes_schema.sql`, needs the table's owner).
    /// Idempotent; when everything exists it sends no DDL at all.
    ///
    /// # Errors
    /// Backend errors ([`PermissionDenied`](lock_core::LockError::PermissionDenied) when the
    /// role may not create or alter the table).
    pub async fn migrate(&self) -> Result<()> {
        let mut conn = self.pool.acquire().await.map_err(classify)?;
        migrate_on(&mut conn, &self.table, self.sessions.sql(), true).await.map(drop)
    }

    /// Whether exclusive grants draw fencing tokens ([`PgLockBuilder::fencing`](crate::PgLockBuilder::fencing)).
    pub fn is_fenced(&self) -> bool {
        self.sessions.sql().fenced
    }

    /// `Unsupported` for `what` when grants are unfenced.
    fn fenced(&self, what: &'static str) -> Result<()> {
        match self.is_fenced() {
            true => Ok(()),
            false => Err(LockError::Unsupported { backend: NAME, what }),
        }
    }

    /// The fence table.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// The pool this backend uses. When the builder opened it, up to four connections whose
    /// holds ended are kept out of it for a moment (about a third of the holder's idle bound)
    /// for the next acquisition; a pool of yours gets each connection back at release.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// The backend pid (`pg_backend_pid()`) of the connection holding `key` for this backend,
    /// for fault injection in tests (`pg_terminate_backend`). `None` if `key` is not held here.
    ///
    /// Only with the `testing` feature, which is for this crate's and the workspace's tests,
    /// not for production: the pid lets a superuser or a member of `pg_signal_backend` end
    /// the hold.
    #[cfg(feature = "testing")]
    pub fn held_backend_pid(&self, key: &str) -> Option<i32> {
        self.sessions.held_backend_pid(key)
    }

    /// Requests this backend sent and waited on the server's answer for, keepers included: the
    /// cost of an acquisition or release as a count, which tests can assert (durations they
    /// cannot). Only with the `testing` feature.
    #[cfg(feature = "testing")]
    pub fn round_trips(&self) -> u64 {
        self.sessions.trips().get()
    }
}

/// Create the fence table on `conn` unless it exists, add the note columns to one of an older
/// version, and create the records table unless it exists. Not `strict` (at build): a role that may lock but does not own the table still
/// builds, as it did before notes; its notes then answer with the server's error until the
/// owner runs [`PgLock::migrate`] (or `sql/notes_schema.sql`).
/// Returns whether grants may draw their fences on the epoch ([`epoch_usable`]) afterwards.
pub(crate) async fn migrate_on(
    conn: &mut PgConnection,
    table: &str,
    sql: &Sql,
    strict: bool,
) -> Result<bool> {
    let (present, has_notes, records_present): (bool, bool, bool) =
        sqlx::query_as(include_str!("../sql/schema_present.sql"))
            .bind(table)
            .bind(format!("{table}_recs"))
            .fetch_one(&mut *conn)
            .await
            .map_err(classify)?;
    if !present {
        sqlx::raw_sql(AssertSqlSafe(sql.schema.clone())).execute(&mut *conn).await.map_err(classify)?;
    } else if !has_notes {
        let added = sqlx::raw_sql(AssertSqlSafe(sql.notes_schema.clone()))
            .execute(&mut *conn)
            .await
            .map_err(classify);
        match added {
            Err(LockError::PermissionDenied { .. }) if !strict => {
                tracing::warn!(%table, "may not add the note columns to the fence table: set_note/note fail until they exist");
            }
            other => other.map(drop)?,
        }
    }
    let mut epoch = epoch_usable(conn, table, sql).await?;
    if !epoch && sql.fenced && Sql::epoch_fits(table) {
        let lacking = "may not create the fence epoch's tables: every grant flushes its fence to disk";
        // Their creator owns them, so may use them.
        epoch = create_optional(conn, table, &sql.epoch_schema, strict, lacking).await?;
    }
    if !records_present {
        let lacking =
            "may not create the records table: latches and stored semaphore counts fail until it exists";
        create_optional(conn, table, &sql.records_schema, strict, lacking).await?;
    }
    Ok(epoch)
}

/// Runs a script that creates tables the locks can do without: a role that may not create
/// them is warned (`lacking`) unless `strict`. Returns whether the tables were made.
async fn create_optional(
    conn: &mut PgConnection,
    table: &str,
    script: &str,
    strict: bool,
    lacking: &str,
) -> Result<bool> {
    let created = sqlx::raw_sql(AssertSqlSafe(script.to_owned())).execute(&mut *conn).await.map_err(classify);
    if created.is_err() {
        // The script's transaction is left aborted: end it, or the connection is stuck.
        let _ = sqlx::raw_sql("ROLLBACK").execute(&mut *conn).await;
    }
    match created {
        Err(LockError::PermissionDenied { .. }) if !strict => {
            tracing::warn!(%table, "{lacking}");
            Ok(false)
        }
        other => other.map(|_| true),
    }
}

/// Whether the fence epoch's tables exist (`sql/epoch_schema.sql`) and this role may use them,
/// so grants may draw their fences without a disk flush each. A role granted only the fence
/// table (this crate's README before the epoch) keeps working, on the flush per grant.
pub(crate) async fn epoch_usable(conn: &mut PgConnection, table: &str, sql: &Sql) -> Result<bool> {
    if !sql.fenced || !Sql::epoch_fits(table) {
        return Ok(false);
    }
    let [epoch, boot] = &sql.epoch_tables;
    sqlx::query_scalar(include_str!("../sql/epoch_ready.sql"))
        .bind(epoch)
        .bind(boot)
        .fetch_one(&mut *conn)
        .await
        .map_err(classify)
}

#[async_trait]
impl LockBackend for PgLock {
    fn name(&self) -> &'static str {
        NAME
    }

    fn identity(&self) -> String {
        self.identity.clone()
    }

    fn capabilities(&self) -> Capability {
        // Not failover_safe: advisory locks live in one server's memory and are not
        // replicated; a promoted standby knows none of them (see the README). Shared holds are
        // pg_advisory_lock_shared: the server queues a shared request behind a waiting
        // exclusive one, so writers are not starved. Unfenced (the builder's `fencing(false)`):
        // no token.
        session::capabilities_with(true, self.sessions.sql().fenced)
    }

    async fn try_acquire(&self, req: &AcquireRequest<'_>) -> Result<Attempt> {
        // The core validates keys already; this guards direct callers.
        validate_key(req.key)?;
        self.sessions.try_acquire(req).await
    }

    async fn release(&self, key: &str, owner: OwnerToken) -> Result<bool> {
        self.sessions.release(key, owner).await
    }

    async fn renew(&self, items: &[RenewItem<'_>]) -> Result<Vec<bool>> {
        self.sessions.renew(items).await
    }

    async fn inspect(&self, key: &str) -> Result<LockInfo> {
        validate_key(key)?;
        self.sessions.inspect(key).await
    }

    /// Not unfenced (the builder's `fencing(false)`): a note names its hold by its token.
    fn notes(&self) -> Option<&dyn Notes> {
        self.sessions.sql().fenced.then_some(self as &dyn Notes)
    }

    // The table `<table>_recs` (records.rs).
    lock_core::backend::hand_out!(records, admin);
}

#[async_trait]
impl Notes for PgLock {
    async fn set_note(&self, key: &str, owner: OwnerToken, note: &str) -> Result<bool> {
        // The core validates both; this guards direct callers.
        validate_key(key)?;
        validate_note(note)?;
        self.fenced("notes (they name the hold by its fencing token)")?;
        self.sessions.set_note(key, owner, note).await
    }

    async fn note(&self, key: &str) -> Result<Option<String>> {
        validate_key(key)?;
        self.fenced("notes (they name the hold by its fencing token)")?;
        self.sessions.note(key).await
    }
}

#[async_trait]
impl Records for PgLock {
    async fn record(&self, key: &str, op: RecordOp<'_>) -> Result<Record> {
        validate_key(key)?;
        self.sessions.record(key, op).await
    }
}

#[async_trait]
impl Admin for PgLock {
    async fn list(&self, _prefix: &str, _limit: usize) -> Result<Vec<String>> {
        Err(lock_core::backend::unsupported(NAME, "listing the locks held"))
    }

    async fn evict(&self, key: &str, fence: FencingToken) -> Result<bool> {
        validate_key(key)?;
        self.fenced("force-unlock (it names the hold by its fencing token)")?;
        self.sessions.evict(key, fence).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn public_types_are_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<PgLock>();
        check::<crate::PgLockBuilder>();
    }
}
