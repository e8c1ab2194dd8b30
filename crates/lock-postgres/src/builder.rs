//! Building a [`PgLock`]: connection, fence table, schema.

use std::fmt;
use std::sync::Arc;

use lock_core::backend::session::{PoolSettings, Source, endpoint, no_source};
use lock_core::{LockError, Result};
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};

use crate::backend::{PgLock, epoch_usable, migrate_on};
use crate::error::{NAME, classify};
use crate::options::{parse_url, validate_table_name};
use crate::pooler;
use crate::session::Advisory;
use crate::sql::Sql;

impl PgLock {
    /// Start building: `PgLock::builder().url("postgres://...").build().await`, or
    /// `PgLock::builder().pool(pool)` with your own `PgPool`.
    pub fn builder() -> PgLockBuilder {
        PgLockBuilder::default()
    }

    /// A lock backend on `url` with default settings.
    ///
    /// # Errors
    /// As [`PgLockBuilder::build`].
    pub async fn from_url(url: &str) -> Result<Self> {
        Self::builder().url(url).build().await
    }
}

/// The fence table unless [`PgLockBuilder::table`] names another.
const DEFAULT_TABLE: &str = "dlock_fence";

/// Builder of a [`PgLock`]; start with [`PgLock::builder`].
pub struct PgLockBuilder {
    source: Source<PgConnectOptions, PgPool>,
    table: Option<String>,
    settings: PoolSettings,
    fencing: Option<bool>,
}

impl fmt::Debug for PgLockBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgLockBuilder")
            .field("source", &self.source)
            .field("table", &self.table)
            .field("max_connections", &self.settings.max_connections())
            .field("keepalive", &self.settings.keepalive_set())
            .field("fencing", &self.fencing)
            .field("create_schema", &self.settings.create_schema())
            .finish()
    }
}

impl Default for PgLockBuilder {
    fn default() -> Self {
        PgLockBuilder { source: Source::None, table: None, settings: PoolSettings::default(), fencing: None }
    }
}

impl PgLockBuilder {
    lock_core::backend::session::pool_builder! {
        /// Connect with a URL: `postgres://user:password@host:5432/database` (or `postgresql://`).
        ///
        /// Three query options are ours: `table=<name>` (the fence table), `keepalive=<duration>`
        /// (`250ms`, `2s`) and `fencing=false`; [`table`](Self::table),
        /// [`keepalive`](Self::keepalive) and [`fencing`](Self::fencing) set on the builder win over
        /// them. The driver's `sslmode`, `sslrootcert`, `application_name` and
        /// `statement-cache-capacity` are passed on; any other option, or one given twice, is
        /// refused by `build`.
        url;
        /// Use an existing pool (yours). Each held lock takes one of its connections out for the
        /// lock's life; size it for your concurrently held locks plus headroom. A connection is
        /// handed back as it was taken (the idle bound the hold set on its session is restored).
        pool: PgPool, connect: PgConnectOptions, lock: PgLock;
    }

    /// The fence table (default `dlock_fence`): lowercase letters, digits and `_`.
    pub fn table(mut self, table: impl Into<String>) -> Self {
        self.table = Some(table.into());
        self
    }

    /// Whether exclusive grants draw a fencing token (default `true`; URL `?fencing=false`).
    /// A token is a counter row bumped and committed durably with every grant, which costs a
    /// write and its WAL flush; without it a grant writes nothing, and
    /// [`fence()`](lock_core::LockGuard::fence) is `None` ([`Capability::fencing`] `false`). So
    /// are the notes, which name a hold by its token: holder identities, `dlock status`'s
    /// "by", and force-unlock ([`Admin::evict`]) answer `Unsupported`. Locks taken in a
    /// transaction ([`PgLock::lock_in_transaction`]) stay fenced. Every process locking a name
    /// should agree: a fenced holder's token says nothing about unfenced ones.
    ///
    /// [`Capability::fencing`]: lock_core::Capability
    /// [`Admin::evict`]: lock_core::backend::Admin::evict
    pub fn fencing(mut self, on: bool) -> Self {
        self.fencing = Some(on);
        self
    }

    /// Connect and create the fence table if asked.
    ///
    /// # Errors
    /// [`LockError::InvalidConfig`] for a missing or unparseable URL, an unknown or repeated
    /// URL option, a bad table name, TLS asked for without the `tls` feature, or a
    /// transaction-pooling proxy (PgBouncer `pool_mode = transaction`) in front of the server,
    /// where session locks would leak to other clients; backend errors
    /// from connecting (temporary when the server is unreachable, permanent for bad
    /// credentials).
    pub async fn build(self) -> Result<PgLock, LockError> {
        // sqlx's TLS verifier takes the process's rustls provider (see lock_core's
        // `ensure_tls_provider`: with lock-zk's TLS compiled in there is none by itself).
        #[cfg(feature = "tls")]
        lock_core::backend::ensure_tls_provider();
        let (settings, mut table, mut url_keepalive, mut fencing) =
            (self.settings, self.table, None, self.fencing);
        let source = self.source.parse_url(|url| {
            let parsed = parse_url(url)?;
            table = table.take().or(parsed.table);
            url_keepalive = parsed.keepalive;
            fencing = fencing.or(parsed.fencing);
            Ok(parsed.connect)
        })?;
        let table = table.unwrap_or_else(|| DEFAULT_TABLE.to_owned());
        validate_table_name(&table)?;
        let keepalive = settings.keepalive(url_keepalive);
        let timeout = settings.acquire_timeout();
        let mut sql = Sql::new(&table, fencing.unwrap_or(true));
        let own_pool = !matches!(source, Source::Pool(_));
        let pool = match source {
            Source::None | Source::Url(_) => return Err(no_source()),
            Source::Options(opts) => {
                use sqlx::{ConnectOptions, Connection};
                // A waiter in pg_advisory_lock for seconds is normal here: no slow-statement
                // warnings (sqlx logs every statement over 1 s at WARN by default).
                let opts = opts.disable_statement_logging();
                // The server checks the client's socket during a statement, so the lock wait of
                // a client that died leaves the queue within a second, not at its deadline (set
                // at startup: a SET inside the waiting statement would not arm it for it).
                let opts = opts.options([("client_connection_check_interval", "1s")]);
                // One direct connection first, for the server's own words on failure. It also
                // does the schema check, and the pool connects lazily: one handshake per build
                // (SCRAM's key derivation is the dearest part of connecting).
                let first = sqlx::postgres::PgConnection::connect_with(&opts);
                let mut conn = settings.connect_first(NAME, first, classify).await?;
                let pool = PgPoolOptions::new()
                    .max_connections(settings.max_connections())
                    .acquire_timeout(timeout)
                    // No ping per checkout: a dead connection fails its first statement with a
                    // temporary error (retried by the core).
                    .test_before_acquire(false)
                    .connect_lazy_with(opts.clone());
                if pooler::forwarded(&mut conn, &opts, timeout).await? {
                    // The probe's connection goes back to the pool when it passes.
                    pooler::refuse_transaction_pooling(&pool, &mut conn, timeout).await?;
                }
                sql = schema(sql, &table, &mut conn, settings.create_schema()).await?;
                let _ = conn.close().await;
                pool
            }
            Source::Pool(pool) => {
                let mut conn = pool.acquire().await.map_err(classify)?;
                let opts = pool.connect_options();
                if pooler::forwarded(&mut conn, &opts, timeout).await? {
                    pooler::refuse_transaction_pooling(&pool, &mut conn, timeout).await?;
                }
                sql = schema(sql, &table, &mut conn, settings.create_schema()).await?;
                drop(conn);
                pool
            }
        };
        let opts = pool.connect_options();
        let endpoint = endpoint(opts.get_socket().map(|p| p.as_path()), opts.get_host(), opts.get_port());
        let database = opts.get_database().unwrap_or(opts.get_username()).to_owned();
        let identity = format!("postgres://{endpoint}/{database}?table={table}");
        let lock = PgLock {
            sessions: Arc::new(Advisory::new(pool.clone(), sql, keepalive, own_pool)),
            pool,
            table,
            identity,
        };
        Ok(lock)
    }
}

/// Migrates the schema when asked (`create`), and returns the statements for `table`: on the
/// fence epoch when its tables are there for this role.
async fn schema(sql: Sql, table: &str, conn: &mut sqlx::PgConnection, create: bool) -> Result<Sql> {
    let epoch = match create {
        true => migrate_on(conn, table, &sql, false).await?,
        false => epoch_usable(conn, table, &sql).await?,
    };
    Ok(if epoch { sql.on_epoch(table) } else { sql })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn debug_never_shows_the_password() {
        let b = PgLock::builder().url("postgres://app:hunter2@h:5432/db?table=t");
        let shown = format!("{b:?}");
        assert!(!shown.contains("hunter2") && shown.contains("app:***@h:5432"), "{shown}");
        let opts = PgConnectOptions::new().host("h").username("u").password("hunter2");
        assert!(!format!("{:?}", PgLock::builder().connect_options(opts)).contains("hunter2"));
    }

    #[tokio::test]
    async fn bad_configuration_is_a_typed_error_before_connecting() {
        let e = PgLock::builder().build().await.expect_err("no source");
        assert!(matches!(e, LockError::InvalidConfig { .. }), "{e:?}");
        let e = PgLock::builder().url("postgres://u:hunter2@127.0.0.1:1/db").table("Bad Name").build().await;
        let e = e.expect_err("bad table");
        assert!(matches!(e, LockError::InvalidConfig { .. }) && !e.to_string().contains("hunter2"), "{e:?}");
    }

    #[tokio::test]
    async fn unreachable_server_is_temporary() {
        let e = PgLock::builder()
            .url("postgres://u:hunter2@127.0.0.1:1/db")
            .acquire_timeout(Duration::from_secs(2))
            .build()
            .await
            .expect_err("nothing listens on port 1");
        assert!(e.is_temporary() && !format!("{e:?}").contains("hunter2"), "{e:?}");
    }
}
