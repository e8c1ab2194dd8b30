//! Building a [`MySqlLock`]: connection, mode, table, schema.

use std::fmt;
use std::sync::Arc;

use lock_core::{LockError, Result};
use sqlx::mysql::{MySqlConnectOptions, MySqlPool, MySqlPoolOptions};

use lock_core::backend::session::{PoolSettings, Source, endpoint, no_source};

use crate::backend::MySqlLock;
use crate::error::{NAME, classify};
use crate::mode::ModeBackend;
use crate::named::Named;
use crate::notify::Waiters;
use crate::optimistic::Optimistic;
use crate::options::{Mode, parse_url};
use crate::pessimistic::Pessimistic;
use crate::session_mode::SessionMode;
use crate::sql::{Flavor, NamedSql, OptimisticSql, PessimisticSql, validate_table_name};

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
}

/// Table of the pessimistic mode (plus `dlock_rows_fence`) unless [`MySqlLockBuilder::table`]
/// names another.
const DEFAULT_PESSIMISTIC_TABLE: &str = "dlock_rows";
/// Table whose fence counter (`dlock_rows_fence`) the named mode shares with the pessimistic
/// mode: a key's tokens increase across both session-bound modes. The named mode creates no
/// table of its own (GET_LOCK needs none).
const DEFAULT_NAMED_TABLE: &str = DEFAULT_PESSIMISTIC_TABLE;
/// Table of the optimistic mode (plus `dlock_leases_fence` on MariaDB).
const DEFAULT_OPTIMISTIC_TABLE: &str = "dlock_leases";

/// Builder of a [`MySqlLock`]; start with [`MySqlLock::builder`].
pub struct MySqlLockBuilder {
    source: Source<MySqlConnectOptions, MySqlPool>,
    mode: Option<Mode>,
    table: Option<String>,
    settings: PoolSettings,
    upgrade_table: bool,
}

impl fmt::Debug for MySqlLockBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MySqlLockBuilder")
            .field("source", &self.source)
            .field("mode", &self.mode)
            .field("table", &self.table)
            .field("max_connections", &self.settings.max_connections())
            .field("keepalive", &self.settings.keepalive(None))
            .field("create_schema", &self.settings.create_schema())
            .field("upgrade_table", &self.upgrade_table)
            .finish()
    }
}

impl Default for MySqlLockBuilder {
    fn default() -> Self {
        MySqlLockBuilder {
            source: Source::None,
            mode: None,
            table: None,
            settings: PoolSettings::default(),
            upgrade_table: false,
        }
    }
}

impl MySqlLockBuilder {
    lock_core::backend::session::pool_builder! {
        /// Connect with a URL: `mysql://user:password@host:3306/database` (MariaDB too). With the
        /// `tls` feature, `?ssl-mode=required|verify_ca|verify_identity&ssl-ca=...` are honoured.
        ///
        /// Two more query options are ours: `mode=pessimistic|optimistic` and `table=<name>`;
        /// [`mode`](Self::mode) and [`table`](Self::table) set on the builder win over them. The
        /// driver's `charset`, `collation`, `statement-cache-capacity`, `socket`, `timezone` and
        /// `ssl-*` are passed on; any other option, or one given twice, is refused by `build`.
        url;
        /// Use an existing pool (yours). Each held pessimistic or named lock takes a connection for
        /// the lock's life from the backend's private pool of holding connections, opened with this
        /// pool's connect options and size (its `after_connect` hook is not run there); this pool
        /// serves the rest (schema, inspection, `KILL QUERY`, optimistic mode). Size it for your
        /// concurrently held locks plus headroom.
        pool: MySqlPool, connect: MySqlConnectOptions, lock: MySqlLock;
    }

    /// Pessimistic (row lock, default), optimistic (versioned lease) or named (`GET_LOCK`).
    pub fn mode(mut self, mode: Mode) -> Self {
        self.mode = Some(mode);
        self
    }

    /// The lock table (default `dlock_rows` in pessimistic mode, `dlock_leases` in optimistic
    /// mode). Validated as a plain identifier by `build`. The named mode keeps its fencing
    /// counter in `<table>_fence` (default `dlock_rows_fence`, shared with the pessimistic mode)
    /// and creates no table itself.
    pub fn table(mut self, table: impl Into<String>) -> Self {
        self.table = Some(table.into());
        self
    }

    /// Optimistic mode: upgrade a lease table created by a lock-mysql from before UTC leases
    /// (default `false`: such a table is refused with [`LockError::InvalidConfig`]).
    ///
    /// Older versions wrote `expires_at` with `NOW(6)`, in each session's `time_zone`, and had
    /// no `attempt` column. Only turn this on once **every client of the older version has
    /// stopped**: the upgrade adds the column and frees every lease in the table (leases of
    /// stopped clients; their expiry times cannot be read back in UTC), keeping each row's
    /// `version` so fencing tokens keep increasing. Needs the `ALTER` privilege.
    pub fn upgrade_table(mut self, upgrade: bool) -> Self {
        self.upgrade_table = upgrade;
        self
    }

    /// Connect, detect MariaDB or MySQL, and create the schema if asked.
    ///
    /// # Errors
    /// [`LockError::InvalidConfig`] for a missing or unparseable URL, an unknown or repeated
    /// URL option, a bad table name or TLS asked for without the `tls` feature; backend errors from connecting (temporary when the
    /// server is unreachable, permanent for bad credentials).
    pub async fn build(self) -> Result<MySqlLock, LockError> {
        // sqlx's TLS verifier takes the process's rustls provider (see lock_core's
        // `ensure_tls_provider`: with lock-zk's TLS compiled in there is none by itself).
        #[cfg(feature = "tls")]
        lock_core::backend::ensure_tls_provider();
        let (mut mode, mut table) = (self.mode, self.table.clone());
        let source = self.source.parse_url(|url| {
            let parsed = parse_url(url)?;
            mode = mode.or(parsed.mode);
            table = table.take().or(parsed.table);
            Ok(parsed.connect)
        })?;
        let mode = mode.unwrap_or_default();
        let table = table.unwrap_or_else(|| match mode {
            Mode::Pessimistic => DEFAULT_PESSIMISTIC_TABLE.to_owned(),
            Mode::Optimistic => DEFAULT_OPTIMISTIC_TABLE.to_owned(),
            Mode::NamedLock => DEFAULT_NAMED_TABLE.to_owned(),
        });
        validate_table_name(&table)?;
        let settings = self.settings;
        let pool_options = || {
            MySqlPoolOptions::new()
                .max_connections(settings.max_connections())
                .acquire_timeout(settings.acquire_timeout())
                // No ping per checkout: a dead connection fails its first statement with a
                // temporary error (retried by the core), and sqlx pings on return anyway.
                .test_before_acquire(false)
        };
        let pool = match source {
            Source::None | Source::Url(_) => return Err(no_source()),
            // A waiter in `SELECT ... FOR UPDATE` for seconds is normal here: no slow-statement
            // warnings (sqlx logs every statement over 1 s at WARN by default).
            Source::Options(opts) => {
                use sqlx::{ConnectOptions, Connection};
                let opts = opts.disable_statement_logging();
                // One direct connection first, for the server's own words on failure.
                let first = sqlx::mysql::MySqlConnection::connect_with(&opts);
                let _ = settings.connect_first(NAME, first, classify).await?.close().await;
                pool_options().connect_with(opts).await.map_err(classify)?
            }
            Source::Pool(pool) => pool,
        };
        let version: String =
            sqlx::query_scalar("SELECT VERSION()").fetch_one(&pool).await.map_err(classify)?;
        let flavor = Flavor::of_version(&version);
        let opts = pool.connect_options();
        let keepalive = settings.keepalive(None);
        let endpoint = endpoint(opts.get_socket().map(|p| p.as_path()), opts.get_host(), opts.get_port());
        let identity =
            format!("mysql://{endpoint}/{}/{table}?mode={mode}", opts.get_database().unwrap_or(""));
        let inner: Arc<dyn ModeBackend> = match mode {
            Mode::Pessimistic => {
                let sql = PessimisticSql::new(&table, flavor);
                Arc::new(SessionMode::new(
                    Pessimistic::new(pool.clone(), sql, flavor, keepalive),
                    identity.clone(),
                ))
            }
            Mode::Optimistic => {
                let sql = OptimisticSql::new(&table, flavor);
                // Waiters queue per lock space, across every backend of it in this process.
                let waiters = Waiters::shared(&identity);
                let mariadb = flavor == Flavor::MariaDb;
                Arc::new(Optimistic::new(pool.clone(), sql, mariadb, waiters, identity.clone()))
            }
            Mode::NamedLock => {
                let sql = NamedSql::new(&table, flavor);
                Arc::new(SessionMode::new(Named::new(pool.clone(), sql, flavor, keepalive), identity.clone()))
            }
        };
        let lock = MySqlLock { inner, pool, mode, table, flavor, server_version: version, identity };
        if settings.create_schema() {
            lock.migrate_with(self.upgrade_table, false).await?;
        } else if mode == Mode::Optimistic {
            lock.check_table_shape(self.upgrade_table).await?;
        }
        Ok(lock)
    }
}
