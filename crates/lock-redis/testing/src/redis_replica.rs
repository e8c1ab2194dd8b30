//! A Redis primary and one replica of it (`redis-server --replicaof`), for the replica
//! acknowledgement tests: pause the replica, kill the primary, promote the replica.

use std::thread;
use std::time::{Duration, Instant};

use super::redis::query;
use super::{RedisServer, ServerError};

/// How long [`RedisReplicaPair::start`] waits for the replica to finish its first sync.
const SYNC_TIMEOUT: Duration = Duration::from_secs(15);

/// A private primary and a replica of it on `127.0.0.1`, both without persistence. Each is a
/// [`RedisServer`], so the fault hooks (`pause`, `kill`, ...) work on either.
///
/// Dropping it kills both servers.
#[derive(Debug)]
pub struct RedisReplicaPair {
    primary: RedisServer,
    replica: RedisServer,
}

impl RedisReplicaPair {
    /// Starts the primary, then the replica with `--replicaof` it, and returns once the
    /// replica's link is up and the primary counts it as connected (so a `WAIT 1` can succeed).
    pub fn start() -> Result<Self, ServerError> {
        let primary = RedisServer::start()?;
        let port = primary.port().to_string();
        let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &port])?;
        let pair = RedisReplicaPair { primary, replica };
        let started = Instant::now();
        loop {
            let link = query(pair.replica.port(), &["INFO", "replication"]);
            let seen = query(pair.primary.port(), &["INFO", "replication"]);
            let last = match (link, seen) {
                (Ok(l), Ok(s)) if l.contains("master_link_status:up") && s.contains("connected_slaves:1") => {
                    return Ok(pair);
                }
                (Ok(l), Ok(_)) => {
                    l.lines().find(|x| x.starts_with("master_link_status")).unwrap_or("").to_owned()
                }
                (Err(e), _) | (_, Err(e)) => e.to_string(),
            };
            if started.elapsed() > SYNC_TIMEOUT {
                return Err(ServerError::NotReady {
                    what: format!("redis replica of 127.0.0.1:{port} in sync ({last})"),
                    waited: started.elapsed(),
                    log_tail: String::new(),
                });
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// The primary.
    pub fn primary(&self) -> &RedisServer {
        &self.primary
    }

    /// The replica.
    pub fn replica(&self) -> &RedisServer {
        &self.replica
    }

    /// Promote the replica to a primary of its own (`REPLICAOF NO ONE`), as a failover does.
    pub fn promote(&self) -> Result<(), ServerError> {
        query(self.replica.port(), &["REPLICAOF", "NO", "ONE"]).map(drop)
    }
}
