//! The testing side of lock-redis, kept next to it (`crates/lock-redis/testing`, unpublished:
//! it depends on the unpublished test kit): private `redis-server`s on free loopback ports, with
//! lock-testkit's process, watchdog and fault hooks. A standalone server (plain, password, TLS:
//! [`RedisServer`]), a primary with a replica ([`RedisReplicaPair`]), a Cluster
//! ([`RedisCluster`]) and a Sentinel-managed pair ([`RedisSentinelSet`], with its [`Failover`]
//! nemesis); the servers shared by one test binary ([`shared_redis`] and the like).
//!
//! Readiness: `INFO server` reports `process_id:` equal to the child's pid.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

use std::sync::OnceLock;

// The test kit's server toolkit, named by the modules as `super::…`.
use lock_testkit::server::{
    ManagedProcess, Probe, ServerError, Spec, TlsFiles, canonical, fault_hooks, find_binary, free_port,
    loopback, make_temp_dir, run_command, with_port_retries,
};

mod floor;
mod redis;
mod redis_cluster;
mod redis_replica;
mod redis_sentinel;
mod side;

pub use redis::RedisServer;
pub use redis_cluster::{CLUSTER_NODE_TIMEOUT_MS, RedisCluster};
pub use redis_replica::RedisReplicaPair;
pub use redis_sentinel::{
    Failover, RedisSentinelSet, SENTINEL_DOWN_AFTER_MS, SENTINEL_MASTER_NAME, SentinelNode,
};
pub use side::Side;

/// Environment variable: URL of an externally managed Redis to test against instead of a private one.
pub const ENV_REDIS_URL: &str = "LOCK_TEST_REDIS_URL";

/// The externally managed server named by [`ENV_REDIS_URL`], if it is set.
pub fn external_url() -> Option<String> {
    lock_testkit::server::url_from_env(ENV_REDIS_URL)
}

/// The Redis server shared by every test of this process, started on first use.
///
/// Never inject faults into a shared server: other tests use it concurrently. It is killed by
/// its watchdog when the process ends.
pub fn try_shared_redis() -> Result<&'static RedisServer, ServerError> {
    static SHARED: OnceLock<Result<RedisServer, ServerError>> = OnceLock::new();
    SHARED.get_or_init(RedisServer::start).as_ref().map_err(Clone::clone)
}

/// Like [`try_shared_redis`], but panics (with the reason) if the server cannot be started.
pub fn shared_redis() -> &'static RedisServer {
    try_shared_redis().unwrap_or_else(|e| panic!("shared redis-server: {e}"))
}

/// The 3-master Redis Cluster (no replicas) shared by every test of this process, started on
/// first use. See [`try_shared_redis`] for the rules.
pub fn try_shared_redis_cluster() -> Result<&'static RedisCluster, ServerError> {
    static SHARED: OnceLock<Result<RedisCluster, ServerError>> = OnceLock::new();
    SHARED.get_or_init(|| RedisCluster::start(3, 0)).as_ref().map_err(Clone::clone)
}

/// The Sentinel-managed primary and replica shared by every test of this process, started on
/// first use. See [`try_shared_redis`] for the rules.
pub fn try_shared_redis_sentinel() -> Result<&'static RedisSentinelSet, ServerError> {
    static SHARED: OnceLock<Result<RedisSentinelSet, ServerError>> = OnceLock::new();
    SHARED.get_or_init(RedisSentinelSet::start).as_ref().map_err(Clone::clone)
}
