//! The testing side of lock-mysql, kept next to it (`crates/lock-mysql/testing`, unpublished:
//! it depends on the unpublished test kit): a private `mariadbd` on a free loopback port
//! ([`MariaDbServer`], plain or TLS, from a per-process template data directory), with
//! lock-testkit's process, watchdog and fault hooks, and the server shared by one test binary
//! ([`shared_mariadb`]).
//!
//! Readiness: `select @@datadir` (through the `mariadb` CLI) prints our datadir.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

use std::sync::OnceLock;

// The test kit's server toolkit, named by the modules as `super::…`.
use lock_testkit::server::{
    ManagedProcess, Probe, ServerError, Spec, TlsFiles, canonical, fault_hooks, find_binary, free_port,
    make_temp_dir, port_accepts, process_lifetime_dir, run_command, running_as_root, with_port_retries,
};

mod floor;
mod mariadb;
mod side;

pub use mariadb::{
    DATABASE as MARIADB_DATABASE, MariaDbServer, PASSWORD as MARIADB_PASSWORD, USER as MARIADB_USER,
    template_dir as mariadb_template_dir,
};
pub use side::Side;

/// Environment variable: URL of an externally managed MySQL/MariaDB (`mysql://user:pw@host:port/db`).
pub const ENV_MYSQL_URL: &str = "LOCK_TEST_MYSQL_URL";

/// The externally managed server named by [`ENV_MYSQL_URL`], if it is set.
pub fn external_url() -> Option<String> {
    lock_testkit::server::url_from_env(ENV_MYSQL_URL)
}

/// The MariaDB server shared by every test of this process, started on first use.
///
/// Never inject faults into a shared server: other tests use it concurrently. It is killed by
/// its watchdog when the process ends.
pub fn try_shared_mariadb() -> Result<&'static MariaDbServer, ServerError> {
    static SHARED: OnceLock<Result<MariaDbServer, ServerError>> = OnceLock::new();
    SHARED.get_or_init(MariaDbServer::start).as_ref().map_err(Clone::clone)
}

/// Like [`try_shared_mariadb`], but panics (with the reason) if the server cannot be started.
pub fn shared_mariadb() -> &'static MariaDbServer {
    try_shared_mariadb().unwrap_or_else(|e| panic!("shared mariadbd: {e}"))
}
