//! The testing side of lock-zk, kept next to it (`crates/lock-zk/testing`, unpublished: it
//! depends on the unpublished test kit): a private standalone ZooKeeper on a free loopback port
//! ([`ZkServer`], plain or TLS) and a three-node ensemble ([`ZkEnsemble`]), with lock-testkit's
//! process, watchdog and fault hooks, and the server shared by one test binary ([`shared_zk`]).
//!
//! Readiness: `srvr` reports `Mode: standalone|leader|follower` and `conf` shows our dataDir
//! (`ruok` is *not* used: it answers before the server serves).
#![forbid(unsafe_code)]
#![deny(missing_docs)]

use std::sync::OnceLock;

// The test kit's server toolkit, named by the modules as `super::…`.
use lock_testkit::server::{
    ManagedProcess, Probe, ServerError, Spec, TlsFiles, canonical, fault_hooks, find_binary, free_port,
    loopback, make_temp_dir, require_file, with_port_retries,
};

mod floor;
mod side;
mod zk;

pub use side::Side;
pub use zk::{DEFAULT_TICK_MS as ZK_DEFAULT_TICK_MS, ZkEnsemble, ZkNode, ZkServer};

/// Environment variable: connect string of an externally managed ZooKeeper (`host:port[,host:port]`).
pub const ENV_ZK_URL: &str = "LOCK_TEST_ZK_URL";

/// The externally managed server named by [`ENV_ZK_URL`], if it is set.
pub fn external_url() -> Option<String> {
    lock_testkit::server::url_from_env(ENV_ZK_URL)
}

/// The standalone ZooKeeper shared by every test of this process, started on first use.
///
/// Never inject faults into a shared server: other tests use it concurrently. It is killed by
/// its watchdog when the process ends.
pub fn try_shared_zk() -> Result<&'static ZkServer, ServerError> {
    static SHARED: OnceLock<Result<ZkServer, ServerError>> = OnceLock::new();
    SHARED.get_or_init(ZkServer::start).as_ref().map_err(Clone::clone)
}

/// Like [`try_shared_zk`], but panics (with the reason) if the server cannot be started.
pub fn shared_zk() -> &'static ZkServer {
    try_shared_zk().unwrap_or_else(|e| panic!("shared zookeeper: {e}"))
}
