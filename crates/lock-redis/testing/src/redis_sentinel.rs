//! A Sentinel-managed Redis: one primary, one replica, three sentinels (`redis-server
//! --sentinel`, no extra package), all private processes on loopback.

use async_trait::async_trait;
use lock_testkit::history::Nemesis;
use std::ffi::OsString;
use std::thread;
use std::time::{Duration, Instant};

use super::redis::query;
use super::{
    ManagedProcess, RedisServer, ServerError, Spec, fault_hooks, find_binary, free_port, make_temp_dir,
};

/// The name the sentinels know the primary by.
pub const SENTINEL_MASTER_NAME: &str = "dlock-primary";
/// How long the primary may be silent before a sentinel thinks it down. Short, so a failover
/// test is quick (the promotion follows within a few seconds).
pub const SENTINEL_DOWN_AFTER_MS: u64 = 500;

/// One `redis-server --sentinel` process with its own (rewritable) configuration file.
#[derive(Debug)]
pub struct SentinelNode {
    proc: ManagedProcess,
}

impl SentinelNode {
    fn start(primary_port: u16) -> Result<Self, ServerError> {
        let program = find_binary("redis-server", "redis-server")?;
        super::with_port_retries(|| {
            let port = free_port()?;
            let dir = make_temp_dir("redis-sentinel")?;
            let base = super::canonical(dir.path());
            let conf = base.join("sentinel.conf");
            // A sentinel rewrites its configuration file: one writable file each.
            let text = format!(
                "port {port}\nbind 127.0.0.1\ndir {dir}\n\
                 sentinel monitor {SENTINEL_MASTER_NAME} 127.0.0.1 {primary_port} 2\n\
                 sentinel down-after-milliseconds {SENTINEL_MASTER_NAME} {SENTINEL_DOWN_AFTER_MS}\n\
                 sentinel failover-timeout {SENTINEL_MASTER_NAME} 2000\n",
                dir = base.display()
            );
            std::fs::write(&conf, text)
                .map_err(|e| ServerError::io(format!("writing {}", conf.display()), e))?;
            let spec = Spec::new(
                format!("redis sentinel on 127.0.0.1:{port}"),
                program.clone(),
                vec![conf.into_os_string(), OsString::from("--sentinel")],
                (port, Vec::new()),
                super::redis::probe(None, None),
                Duration::from_secs(15),
            );
            Ok(SentinelNode { proc: ManagedProcess::start(spec, dir)? })
        })
    }

    /// The sentinel's port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.proc.port()
    }
}

fault_hooks!(SentinelNode, proc);

/// A primary, its replica and three sentinels watching it as [`SENTINEL_MASTER_NAME`] (quorum
/// 2). Ready when the replica is in sync and every sentinel knows the replica and the two other
/// sentinels, so a failover can start as soon as the primary dies.
///
/// Dropping it kills every process. The fault hooks are on each server.
#[derive(Debug)]
pub struct RedisSentinelSet {
    servers: Vec<RedisServer>,
    sentinels: Vec<SentinelNode>,
}

impl RedisSentinelSet {
    /// Starts the primary, the replica, then the sentinels (about a second).
    pub fn start() -> Result<Self, ServerError> {
        let primary = RedisServer::start()?;
        let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &primary.port().to_string()])?;
        // Sentinels learn the replicas from the primary's INFO when they connect and then only
        // every 10 s: the replica must be attached before they start.
        // Online, not only attached: a client asking for a replica's acknowledgement (`WAIT`)
        // is refused until the first sync ends.
        wait_for("the replica to sync", Duration::from_secs(15), || replica_online(primary.port()))?;
        let mut sentinels = Vec::new();
        for _ in 0..3 {
            sentinels.push(SentinelNode::start(primary.port())?);
        }
        let set = RedisSentinelSet { servers: vec![primary, replica], sentinels };
        wait_for("the sentinels to find each other", Duration::from_secs(20), || {
            for s in &set.sentinels {
                let info = query(s.port(), &["INFO", "sentinel"])?;
                if !info.contains("status=ok") || !info.contains("slaves=1,sentinels=3") {
                    return Ok(false);
                }
            }
            Ok(true)
        })?;
        Ok(set)
    }

    /// `redis+sentinel://127.0.0.1:s1,127.0.0.1:s2,127.0.0.1:s3/dlock-primary`.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self.sentinels.iter().map(|s| format!("127.0.0.1:{}", s.port())).collect();
        format!("redis+sentinel://{}/{SENTINEL_MASTER_NAME}", hosts.join(","))
    }

    /// The two data servers, in start order (the first started as the primary).
    pub fn servers(&self) -> &[RedisServer] {
        &self.servers
    }

    /// The sentinels.
    pub fn sentinels(&self) -> &[SentinelNode] {
        &self.sentinels
    }

    /// The index (into [`servers`](Self::servers)) of the primary the sentinels name now.
    pub fn primary(&self) -> Result<usize, ServerError> {
        let sentinel = self
            .sentinels
            .iter()
            .find(|s| s.is_running())
            .ok_or_else(|| ServerError::NotRunning { what: "every sentinel".into() })?;
        let info = query(sentinel.port(), &["INFO", "sentinel"])?;
        let addr = info
            .lines()
            .find_map(|l| l.split(",address=").nth(1))
            .and_then(|rest| rest.split(',').next())
            .and_then(|a| a.rsplit(':').next())
            .and_then(|p| p.parse::<u16>().ok());
        addr.and_then(|p| self.servers.iter().position(|s| s.port() == p))
            .ok_or_else(|| ServerError::Protocol { what: "INFO sentinel".into(), detail: info })
    }

    /// Waits until the primary has its replica in sync again (after a failover, the old
    /// primary once the sentinels have turned it into a replica); returns the primary's index.
    pub fn wait_for_replica(&self, timeout: Duration) -> Result<usize, ServerError> {
        let mut primary = 0;
        wait_for("the replica to sync", timeout, || {
            primary = self.primary()?;
            replica_online(self.servers[primary].port())
        })?;
        Ok(primary)
    }

    /// Waits until the sentinels name a primary other than server `old` and it answers as a
    /// master (after `old` was killed: the replica's promotion).
    pub fn wait_for_failover(&self, old: usize, timeout: Duration) -> Result<usize, ServerError> {
        let mut new = old;
        wait_for("the sentinels to promote the replica", timeout, || {
            new = match self.primary() {
                Ok(p) => p,
                Err(_) => return Ok(false),
            };
            if new == old {
                return Ok(false);
            }
            let role = query(self.servers[new].port(), &["INFO", "replication"])?;
            Ok(role.lines().any(|l| l.trim() == "role:master"))
        })?;
        Ok(new)
    }
}

/// Whether the server on `port` is a primary with a replica in sync.
fn replica_online(port: u16) -> Result<bool, ServerError> {
    let info = query(port, &["INFO", "replication"])?;
    Ok(info.lines().any(|l| l.trim() == "role:master")
        && info.lines().any(|l| l.starts_with("slave0:") && l.contains("state=online")))
}

/// Polls `check` every 20 ms until it says yes (probe errors count as no), at most `timeout`.
fn wait_for(
    what: &str,
    timeout: Duration,
    mut check: impl FnMut() -> Result<bool, ServerError>,
) -> Result<(), ServerError> {
    let started = Instant::now();
    loop {
        let last = match check() {
            Ok(true) => return Ok(()),
            Ok(false) => String::from("not yet"),
            Err(e) => e.to_string(),
        };
        if started.elapsed() > timeout {
            return Err(ServerError::NotReady {
                what: format!("{what} ({last})"),
                waited: started.elapsed(),
                log_tail: String::new(),
            });
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// The Sentinel primary paused until the sentinels promote its replica (at most the given
/// time), resumed when healing, and healed once the sentinels have made it a replica in sync.
pub struct Failover<'a>(pub &'a RedisSentinelSet, pub Duration);
#[async_trait]
impl Nemesis for Failover<'_> {
    fn name(&self) -> String {
        "primary paused until its replica is promoted".into()
    }
    async fn strike(&self) {
        let Failover(set, limit) = *self;
        tokio::task::block_in_place(|| {
            let old = set.primary().expect("primary");
            set.servers()[old].pause().expect("pause primary");
            set.wait_for_failover(old, limit).expect("promotion");
        });
    }
    async fn heal(&self) {
        let Failover(set, limit) = *self;
        for s in set.servers().iter().filter(|s| s.process().is_paused()) {
            s.resume().expect("resume the old primary");
        }
        // Until the old primary is a replica in sync again, grants that ask for a replica's
        // acknowledgement are refused: the fault lasts until then.
        tokio::task::block_in_place(|| set.wait_for_replica(limit)).expect("the old primary rejoins");
    }
}

impl std::fmt::Debug for Failover<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name())
    }
}
