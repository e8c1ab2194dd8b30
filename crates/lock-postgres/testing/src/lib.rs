//! The testing side of lock-postgres, kept next to it (`crates/lock-postgres/testing`,
//! unpublished: it depends on the unpublished test kit): a private PostgreSQL on a free loopback
//! port ([`PgServer`], from a per-process template cluster), a PgBouncer in front of it
//! ([`PgBouncer`]), the [`RowsLocked`] nemesis, with lock-testkit's process, watchdog and fault
//! hooks, and the server shared by one test binary ([`shared_postgres`]).
//!
//! Readiness: `SHOW data_directory` (through `psql`) prints our data directory.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

use std::sync::OnceLock;

// The test kit's server toolkit, named by the modules as `super::…`.
use lock_testkit::server::{
    ManagedProcess, Probe, ServerError, Spec, canonical, fault_hooks, free_port, make_temp_dir, port_accepts,
    process_lifetime_dir, run_command, running_as_root, with_port_retries,
};

mod faults;
mod floor;
mod pgbouncer;
mod postgres;
mod side;

pub use faults::RowsLocked;
pub use pgbouncer::PgBouncer;
pub use postgres::{
    ADMIN_PASSWORD as POSTGRES_ADMIN_PASSWORD, DATABASE as POSTGRES_DATABASE, PASSWORD as POSTGRES_PASSWORD,
    PgServer, USER as POSTGRES_USER,
};
pub use side::Side;

/// Environment variable: URL of an externally managed PostgreSQL (`postgres://user:pw@host:port/db`;
/// the role must be able to create the fence table, and to terminate its own backends).
pub const ENV_POSTGRES_URL: &str = "LOCK_TEST_POSTGRES_URL";

/// The externally managed server named by [`ENV_POSTGRES_URL`], if it is set.
pub fn external_url() -> Option<String> {
    lock_testkit::server::url_from_env(ENV_POSTGRES_URL)
}

/// The PostgreSQL server shared by every test of this process, started on first use.
///
/// Never inject faults into a shared server: other tests use it concurrently. It is killed by
/// its watchdog when the process ends.
pub fn try_shared_postgres() -> Result<&'static PgServer, ServerError> {
    static SHARED: OnceLock<Result<PgServer, ServerError>> = OnceLock::new();
    SHARED.get_or_init(PgServer::start).as_ref().map_err(Clone::clone)
}

/// Like [`try_shared_postgres`], but panics (with the reason) if the server cannot be started.
pub fn shared_postgres() -> &'static PgServer {
    try_shared_postgres().unwrap_or_else(|e| panic!("shared postgres: {e}"))
}
