//! The testing side of lock-etcd, kept next to it (`crates/lock-etcd/testing`, unpublished: it
//! depends on the unpublished test kit): a private single-node etcd on a free loopback port
//! ([`EtcdServer`], plain or TLS) and a three-member cluster ([`EtcdCluster`]), with
//! lock-testkit's process, watchdog and fault hooks, and the server shared by one test binary
//! ([`shared_etcd`]).
//!
//! Readiness: `endpoint health` commits and `member list` shows our member's name answering.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

use std::sync::OnceLock;

// The test kit's server toolkit, named by the modules as `super::…`.
use lock_testkit::server::{
    ManagedProcess, Probe, ServerError, Spec, TlsFiles, canonical, fault_hooks, find_binary, free_port,
    make_temp_dir, run_command, with_port_retries,
};

mod etcd;
mod floor;
mod side;

pub use etcd::{EtcdCluster, EtcdNode, EtcdServer};
pub use side::Side;

/// Environment variable: endpoints of an externally managed etcd (`host:port[,host:port]`).
pub const ENV_ETCD_URL: &str = "LOCK_TEST_ETCD_URL";

/// The externally managed server named by [`ENV_ETCD_URL`], if it is set.
pub fn external_url() -> Option<String> {
    lock_testkit::server::url_from_env(ENV_ETCD_URL)
}

/// The single-node etcd shared by every test of this process, started on first use.
///
/// Never inject faults into a shared server: other tests use it concurrently. It is killed by
/// its watchdog when the process ends.
pub fn try_shared_etcd() -> Result<&'static EtcdServer, ServerError> {
    static SHARED: OnceLock<Result<EtcdServer, ServerError>> = OnceLock::new();
    SHARED.get_or_init(EtcdServer::start).as_ref().map_err(Clone::clone)
}

/// Like [`try_shared_etcd`], but panics (with the reason) if the server cannot be started.
pub fn shared_etcd() -> &'static EtcdServer {
    try_shared_etcd().unwrap_or_else(|e| panic!("shared etcd: {e}"))
}
