//! Real, throw-away Redis, MariaDB and ZooKeeper servers on loopback, with fault hooks.
//!
//! Every server is a direct child of the test process, started in its own process group on a
//! free `127.0.0.1` port, with its files in a private temporary directory (under `/dev/shm` when
//! it exists). Readiness always proves that the process answering on the port is *ours*:
//!
//! * Redis: `INFO server` reports `process_id:` equal to the child's pid;
//! * MariaDB: `select @@datadir` (through the `mariadb` CLI) prints our datadir;
//! * PostgreSQL: `SHOW data_directory` (through `psql`) prints our data directory;
//! * etcd: `endpoint health` commits and `member list` shows our member's name answering;
//! * ZooKeeper: `srvr` reports `Mode: standalone|leader|follower` and `conf` shows our dataDir
//!   (`ruok` is *not* used: it answers before the server serves).
//!
//! The fault hooks (`kill`, `stop`, `restart`, `pause`, `resume`, `is_running`) live once in
//! [`ManagedProcess`]; every server type and every ensemble node forwards to it, and also
//! implements [`FaultControl`] for code that is generic over servers.
//!
//! One concern per file: `host` (ports, binaries, directories), `process` (spawn, watchdog,
//! kill / stop / restart / pause / resume), `probe` (readiness), `fault` (the hooks as a trait),
//! `error`, and one file per server (`redis`, `mariadb`, `zk`).
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
//! The servers come from Debian packages (`redis-server`, `mariadb-server` + `mariadb-client`,
//! `zookeeper`). A missing binary or jar gives [`ServerError::MissingBinary`], which names the
//! package to install.

use std::path::PathBuf;
use std::sync::OnceLock;

mod error;
mod etcd;
mod fault;
mod host;
mod mariadb;
mod pgbouncer;
mod postgres;
mod probe;
mod process;
mod redis;
mod redis_cluster;
mod redis_replica;
mod redis_sentinel;
mod watchdog;
mod zk;

pub use error::ServerError;
pub use etcd::{EtcdCluster, EtcdNode, EtcdServer};
pub use fault::FaultControl;
pub(crate) use fault::fault_hooks;
pub(crate) use host::{
    canonical, find_binary, loopback, make_temp_dir, port_accepts, require_file, run_command, running_as_root,
};
pub use host::{free_port, is_installed};
pub use mariadb::{
    DATABASE as MARIADB_DATABASE, MariaDbServer, PASSWORD as MARIADB_PASSWORD, USER as MARIADB_USER,
    template_dir as mariadb_template_dir,
};
pub use pgbouncer::PgBouncer;
pub use postgres::{
    ADMIN_PASSWORD as POSTGRES_ADMIN_PASSWORD, DATABASE as POSTGRES_DATABASE, PASSWORD as POSTGRES_PASSWORD,
    PgServer, RowsLocked, USER as POSTGRES_USER,
};
pub use probe::Probe;
pub(crate) use process::with_port_retries;
pub use process::{ManagedProcess, Spec};
pub use redis::RedisServer;
pub use redis_cluster::{CLUSTER_NODE_TIMEOUT_MS, RedisCluster};
pub use redis_replica::RedisReplicaPair;
pub use redis_sentinel::{
    Failover, RedisSentinelSet, SENTINEL_DOWN_AFTER_MS, SENTINEL_MASTER_NAME, SentinelNode,
};
pub(crate) use watchdog::process_lifetime_dir;
pub use zk::{DEFAULT_TICK_MS as ZK_DEFAULT_TICK_MS, ZkEnsemble, ZkNode, ZkServer};

/// PEM files for a server that speaks TLS ([`RedisServer::start_tls`],
/// [`MariaDbServer::start_tls`]).
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

/// Environment variable: URL of an externally managed Redis to test against instead of a private one.
pub const ENV_REDIS_URL: &str = "LOCK_TEST_REDIS_URL";
/// Environment variable: URL of an externally managed MySQL/MariaDB (`mysql://user:pw@host:port/db`).
pub const ENV_MYSQL_URL: &str = "LOCK_TEST_MYSQL_URL";
/// Environment variable: connect string of an externally managed ZooKeeper (`host:port[,host:port]`).
pub const ENV_ZK_URL: &str = "LOCK_TEST_ZK_URL";
/// Environment variable: URL of an externally managed PostgreSQL (`postgres://user:pw@host:port/db`;
/// the role must be able to create the fence table, and to terminate its own backends).
pub const ENV_POSTGRES_URL: &str = "LOCK_TEST_POSTGRES_URL";
/// Environment variable: endpoints of an externally managed etcd (`host:port[,host:port]`).
pub const ENV_ETCD_URL: &str = "LOCK_TEST_ETCD_URL";
/// Environment variable: when `1`, tests must fail (not skip) if a server cannot be provided.
pub const ENV_REQUIRE: &str = "LOCK_TEST_REQUIRE";

// ---------------------------------------------------------------------------------------------
// Environment helpers
// ---------------------------------------------------------------------------------------------

/// The externally managed server to use for `backend`, if its environment variable is set.
///
/// `backend` is `"redis"`, `"mysql"`/`"mariadb"` or `"zk"`/`"zookeeper"`; the variables are
/// [`ENV_REDIS_URL`], [`ENV_MYSQL_URL`] and [`ENV_ZK_URL`]. Empty values count as unset.
pub fn external_url(backend: &str) -> Option<String> {
    let var = match backend.to_ascii_lowercase().as_str() {
        "redis" => ENV_REDIS_URL,
        "mysql" | "mariadb" => ENV_MYSQL_URL,
        "zk" | "zookeeper" => ENV_ZK_URL,
        "etcd" => ENV_ETCD_URL,
        "postgres" | "postgresql" => ENV_POSTGRES_URL,
        _ => return None,
    };
    std::env::var(var).ok().map(|v| v.trim().to_string()).filter(|v| !v.is_empty())
}

/// True if `LOCK_TEST_REQUIRE=1`: a test that cannot get its server must fail instead of skip.
pub fn require_servers() -> bool {
    std::env::var(ENV_REQUIRE).is_ok_and(|v| v.trim() == "1")
}

// ---------------------------------------------------------------------------------------------
// Shared (per test binary) servers
// ---------------------------------------------------------------------------------------------

static SHARED_REDIS: OnceLock<Result<RedisServer, ServerError>> = OnceLock::new();
static SHARED_MARIADB: OnceLock<Result<MariaDbServer, ServerError>> = OnceLock::new();
static SHARED_ZK: OnceLock<Result<ZkServer, ServerError>> = OnceLock::new();
static SHARED_ETCD: OnceLock<Result<EtcdServer, ServerError>> = OnceLock::new();
static SHARED_POSTGRES: OnceLock<Result<PgServer, ServerError>> = OnceLock::new();
static SHARED_REDIS_CLUSTER: OnceLock<Result<RedisCluster, ServerError>> = OnceLock::new();
static SHARED_REDIS_SENTINEL: OnceLock<Result<RedisSentinelSet, ServerError>> = OnceLock::new();

/// The 3-master Redis Cluster (no replicas) shared by every test of this process, started on
/// first use. See [`try_shared_redis`] for the rules.
pub fn try_shared_redis_cluster() -> Result<&'static RedisCluster, ServerError> {
    SHARED_REDIS_CLUSTER.get_or_init(|| RedisCluster::start(3, 0)).as_ref().map_err(Clone::clone)
}

/// The Sentinel-managed primary and replica shared by every test of this process, started on
/// first use. See [`try_shared_redis`] for the rules.
pub fn try_shared_redis_sentinel() -> Result<&'static RedisSentinelSet, ServerError> {
    SHARED_REDIS_SENTINEL.get_or_init(RedisSentinelSet::start).as_ref().map_err(Clone::clone)
}

/// The Redis server shared by every test of this process, started on first use.
///
/// Never inject faults into a shared server: other tests use it concurrently. It is killed by
/// its watchdog when the process ends.
pub fn try_shared_redis() -> Result<&'static RedisServer, ServerError> {
    SHARED_REDIS.get_or_init(RedisServer::start).as_ref().map_err(Clone::clone)
}

/// The MariaDB server shared by every test of this process, started on first use.
/// See [`try_shared_redis`] for the rules.
pub fn try_shared_mariadb() -> Result<&'static MariaDbServer, ServerError> {
    SHARED_MARIADB.get_or_init(MariaDbServer::start).as_ref().map_err(Clone::clone)
}

/// The standalone ZooKeeper shared by every test of this process, started on first use.
/// See [`try_shared_redis`] for the rules.
pub fn try_shared_zk() -> Result<&'static ZkServer, ServerError> {
    SHARED_ZK.get_or_init(ZkServer::start).as_ref().map_err(Clone::clone)
}

/// The PostgreSQL server shared by every test of this process, started on first use.
/// See [`try_shared_redis`] for the rules.
pub fn try_shared_postgres() -> Result<&'static PgServer, ServerError> {
    SHARED_POSTGRES.get_or_init(PgServer::start).as_ref().map_err(Clone::clone)
}

/// Like [`try_shared_postgres`], but panics (with the reason) if the server cannot be started.
pub fn shared_postgres() -> &'static PgServer {
    try_shared_postgres().unwrap_or_else(|e| panic!("shared postgres: {e}"))
}

/// The single-node etcd shared by every test of this process, started on first use.
/// See [`try_shared_redis`] for the rules.
pub fn try_shared_etcd() -> Result<&'static EtcdServer, ServerError> {
    SHARED_ETCD.get_or_init(EtcdServer::start).as_ref().map_err(Clone::clone)
}

/// Like [`try_shared_etcd`], but panics (with the reason) if the server cannot be started.
pub fn shared_etcd() -> &'static EtcdServer {
    try_shared_etcd().unwrap_or_else(|e| panic!("shared etcd: {e}"))
}

/// Like [`try_shared_redis`], but panics (with the reason) if the server cannot be started.
pub fn shared_redis() -> &'static RedisServer {
    try_shared_redis().unwrap_or_else(|e| panic!("shared redis-server: {e}"))
}

/// Like [`try_shared_mariadb`], but panics (with the reason) if the server cannot be started.
pub fn shared_mariadb() -> &'static MariaDbServer {
    try_shared_mariadb().unwrap_or_else(|e| panic!("shared mariadbd: {e}"))
}

/// Like [`try_shared_zk`], but panics (with the reason) if the server cannot be started.
pub fn shared_zk() -> &'static ZkServer {
    try_shared_zk().unwrap_or_else(|e| panic!("shared zookeeper: {e}"))
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
    fn external_url_maps_backends() {
        assert_eq!(external_url("nosuch"), None);
    }
}
