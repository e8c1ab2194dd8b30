//! The toolkit for throw-away servers on loopback, with fault hooks: each store's testing
//! crate (`crates/lock-<store>/testing`) starts its own server with it.
//!
//! Every server is a direct child of the test process, started in its own process group on a
//! free `127.0.0.1` port ([`free_port`]), with its files in a private temporary directory (under
//! `/dev/shm` when it exists: [`make_temp_dir`]; on disk for servers run as packaged:
//! [`Durability`]). Readiness always proves that the process
//! answering on the port is *ours*: a [`Probe`] written by the store's testing crate asks the
//! server for something only ours can answer (its pid, its data directory, its member name).
//!
//! The fault hooks (`kill`, `stop`, `restart`, `pause`, `resume`, `is_running`) live once in
//! [`ManagedProcess`]; every server type and every ensemble node forwards to it
//! ([`fault_hooks!`](crate::fault_hooks)), and also implements [`FaultControl`] for code that is
//! generic over servers.
//!
//! One concern per file: `host` (ports, binaries, directories), `durability` (fast or as
//! packaged), `process` (spawn, watchdog,
//! kill / stop / restart / pause / resume), `probe` (readiness), `fault` (the hooks as a trait),
//! `watchdog` (no orphans), `error`.
//!
//! # No orphans
//!
//! Next to every server runs a tiny watchdog (`/bin/sh`) whose stdin is a pipe held only by the
//! test process. When the test process ends in any way (panic, `exit`, SIGKILL, or simply never
//! dropping a server kept in a `static`), the kernel closes the pipe, the watchdog reads EOF,
//! SIGKILLs the server and removes its directory. Dropping a server kills it (SIGKILL + wait),
//! kills its watchdog and removes the directory.
//!
//! # Missing binaries
//!
//! The servers come from Debian packages. A missing binary or jar gives
//! [`ServerError::MissingBinary`], which names the package to install.

use std::path::PathBuf;

mod durability;
mod error;
mod fault;
mod host;
mod probe;
mod process;
mod watchdog;

pub use crate::fault_hooks;
pub use durability::{Durability, disk_base, durability, durable, filesystem_of, set_durability};
pub use error::ServerError;
pub use fault::FaultControl;
pub use host::{
    canonical, find_binary, free_port, is_installed, loopback, make_temp_dir, port_accepts, require_file,
    run_command, running_as_root,
};
pub use probe::Probe;
pub use process::{ManagedProcess, Spec, with_port_retries};
pub use watchdog::process_lifetime_dir;

/// PEM files for a server that speaks TLS.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    /// The server's certificate (chain), PEM.
    pub cert: PathBuf,
    /// The server's private key, PEM.
    pub key: PathBuf,
    /// The CA (PEM) the server trusts for client certificates; clients are not required to
    /// present one unless the extra arguments say so.
    pub ca: PathBuf,
}

/// Environment variable: when `1`, tests must fail (not skip) if a server cannot be provided.
pub const ENV_REQUIRE: &str = "LOCK_TEST_REQUIRE";

/// The value of the environment variable `var` (each store's testing crate names its own, for
/// an externally managed server to test against instead of a private one), trimmed; empty
/// values count as unset.
pub fn url_from_env(var: &str) -> Option<String> {
    std::env::var(var).ok().map(|v| v.trim().to_string()).filter(|v| !v.is_empty())
}

/// True if `LOCK_TEST_REQUIRE=1`: a test that cannot get its server must fail instead of skip.
pub fn require_servers() -> bool {
    std::env::var(ENV_REQUIRE).is_ok_and(|v| v.trim() == "1")
}

/// `Some(server)` from a start result, or `None` after printing `SKIPPED <what>: <reason>` when
/// its package is not installed and [`require_servers`] is off; any other failure panics (this
/// is for tests: `let Some(srv) = or_skip("redis", RedisServer::start()) else { return };`).
pub fn or_skip<T>(what: &str, started: Result<T, ServerError>) -> Option<T> {
    match started {
        Ok(s) => Some(s),
        Err(e) if e.is_missing_binary() && !require_servers() => {
            eprintln!("SKIPPED {what}: {e}");
            None
        }
        Err(e) => panic!("{what}: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_environment_values_count_as_unset() {
        assert_eq!(url_from_env("LOCK_TEST_SURELY_UNSET_VARIABLE"), None);
    }
}
