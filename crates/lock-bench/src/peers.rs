//! The Rust peers a user would pick instead of this library, as comparison targets on the same
//! servers and scenarios (cargo feature `peers`): `rslock` (Redis) and `distributed-lock`'s
//! Redis, MySQL and PostgreSQL crates. Each is called through its normal blocking acquire with a wait,
//! exactly as its docs show a user calling it.
//!
//! Without the feature no peer target exists: only [`Peer`], the list of them, is built.

#[cfg(feature = "peers")]
pub use client::{Client, Held};
use dlock::backend::Capability;

/// A peer crate, in one of its backends.
#[cfg_attr(not(feature = "peers"), allow(dead_code))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Peer {
    /// `rslock` (Redlock over one Redis server): `LockManager::acquire(key, ttl)` loops until
    /// it holds; the wait is a `tokio::time::timeout` around it, as a user bounds it.
    Rslock,
    /// `distributed-lock-redis`: `create_lock(key).acquire(Some(wait))`, with its own
    /// background extension (a watchdog).
    DistributedLockRedis,
    /// `distributed-lock-mysql`: `GET_LOCK(name, wait)` on a pooled connection.
    DistributedLockMysql,
    /// `distributed-lock-postgres`: session advisory locks (`pg_advisory_lock`, shared ones for
    /// its read-write lock's readers) on a pooled connection.
    DistributedLockPostgres,
    /// Apache Curator's `InterProcessMutex` (Java), on the zk target's server. It needs no
    /// cargo feature (the JVM is a child process: `scenarios/curator.rs` runs it).
    Curator,
    /// kazoo's `ReadLock`/`WriteLock` and `Semaphore` (Python), on the zk target's server: a
    /// child process too (`scenarios/kazoo.rs`), for the read-write lock and the semaphore.
    Kazoo,
}

impl Peer {
    /// The capabilities that pick the target's floor: `GET_LOCK` waits in the server, like the
    /// pessimistic mode's locking read, so it is compared with the same floor.
    pub fn floor_capability(self) -> Capability {
        let mut caps = Capability::default();
        match self {
            Peer::Rslock | Peer::DistributedLockRedis => {}
            Peer::DistributedLockMysql | Peer::DistributedLockPostgres | Peer::Curator | Peer::Kazoo => {
                caps.native_wait = true;
            }
        }
        caps
    }

    /// Why this peer cannot take part in a scenario whose clients wait for a held key, if it
    /// cannot.
    pub fn cannot_wait(self) -> Option<&'static str> {
        match self {
            Peer::Rslock
            | Peer::DistributedLockMysql
            | Peer::DistributedLockPostgres
            | Peer::Curator
            | Peer::Kazoo => None,
            // Read in distributed-lock-redis 0.2.0 (redlock/acquire.rs, single server) and
            // seen in a run: a held key answers `Timeout` at once, whatever the wait.
            Peer::DistributedLockRedis => {
                Some("acquire(Some(wait)) makes one attempt and fails at once on a held key")
            }
        }
    }
}

#[cfg(feature = "peers")]
mod client {
    use std::sync::Arc;
    use std::time::Duration;

    use super::Peer;
    use crate::error::{BenchError, Result};

    impl Peer {
        /// A new independent client (its own connection or pool) of the server at `url`.
        pub async fn connect(self, url: &str) -> Result<Client> {
            match self {
                Peer::Rslock => {
                    let client = dlock::lock_redis::redis::Client::open(url)
                        .map_err(BenchError::driver("rslock connect"))?;
                    Ok(Client::Rslock(rslock::LockManager::from_clients(vec![client])))
                }
                Peer::DistributedLockRedis => {
                    let p = distributed_lock_redis::RedisLockProvider::new(url)
                        .await
                        .map_err(BenchError::driver("distributed-lock-redis connect"))?;
                    Ok(Client::DistributedLockRedis(Arc::new(p)))
                }
                Peer::DistributedLockMysql => {
                    let p = distributed_lock_mysql::MySqlLockProvider::new(url)
                        .await
                        .map_err(BenchError::driver("distributed-lock-mysql connect"))?;
                    Ok(Client::DistributedLockMysql(Arc::new(p)))
                }
                Peer::DistributedLockPostgres => {
                    let p = distributed_lock_postgres::PostgresLockProvider::new(url)
                        .await
                        .map_err(BenchError::driver("distributed-lock-postgres connect"))?;
                    Ok(Client::DistributedLockPostgres(Arc::new(p)))
                }
                // Child processes, driven by their own scenarios (scenarios/curator.rs and
                // kazoo.rs), never through here.
                Peer::Curator | Peer::Kazoo => Err(BenchError::Peer("no in-process client".into())),
            }
        }
    }

    /// One client of a peer.
    #[derive(Clone)]
    pub enum Client {
        Rslock(rslock::LockManager),
        DistributedLockRedis(Arc<distributed_lock_redis::RedisLockProvider>),
        DistributedLockMysql(Arc<distributed_lock_mysql::MySqlLockProvider>),
        DistributedLockPostgres(Arc<distributed_lock_postgres::PostgresLockProvider>),
    }

    // By hand: the providers have no `Debug`, and a connection string is never printed.
    impl std::fmt::Debug for Client {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            let name = match *self {
                Client::Rslock(_) => "rslock",
                Client::DistributedLockRedis(_) => "distributed-lock-redis",
                Client::DistributedLockMysql(_) => "distributed-lock-mysql",
                Client::DistributedLockPostgres(_) => "distributed-lock-postgres",
            };
            f.debug_tuple("Client").field(&name).finish()
        }
    }

    /// A lock a peer holds.
    pub enum Held {
        Rslock(rslock::LockGuard),
        DistributedLockRedis(distributed_lock_redis::RedisLockHandle),
        DistributedLockMysql(distributed_lock_mysql::MySqlLockHandle),
        DistributedLockPostgres(distributed_lock_postgres::handle::PostgresLockHandle),
    }

    impl std::fmt::Debug for Held {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("Held")
        }
    }

    impl Client {
        /// The peer's blocking acquire of `key`, waiting at most `wait`; `lease` is the TTL where
        /// the peer takes one (rslock), otherwise the peer keeps its own lease.
        pub async fn acquire(&self, key: &str, lease: Duration, wait: Duration) -> Result<Held> {
            match self {
                Client::Rslock(m) => {
                    let held = tokio::time::timeout(wait, m.acquire(key, lease))
                        .await
                        .map_err(|_| BenchError::PeerTimeout { peer: "rslock", wait })?
                        .map_err(BenchError::driver("rslock acquire"))?;
                    Ok(Held::Rslock(held))
                }
                Client::DistributedLockRedis(p) => {
                    use distributed_lock_core::traits::{DistributedLock, LockProvider};
                    let held = p
                        .create_lock(key)
                        .acquire(Some(wait))
                        .await
                        .map_err(BenchError::driver("distributed-lock-redis acquire"))?;
                    Ok(Held::DistributedLockRedis(held))
                }
                Client::DistributedLockMysql(p) => {
                    use distributed_lock_core::traits::{DistributedLock, LockProvider};
                    let held = p
                        .create_lock(key)
                        .acquire(Some(wait))
                        .await
                        .map_err(BenchError::driver("distributed-lock-mysql acquire"))?;
                    Ok(Held::DistributedLockMysql(held))
                }
                Client::DistributedLockPostgres(p) => {
                    use distributed_lock_core::traits::{DistributedLock, LockProvider};
                    let held = p
                        .create_lock(key)
                        .acquire(Some(wait))
                        .await
                        .map_err(BenchError::driver("distributed-lock-postgres acquire"))?;
                    Ok(Held::DistributedLockPostgres(held))
                }
            }
        }
    }

    impl Held {
        /// Release through the peer's own call.
        pub async fn release(self) -> Result<()> {
            match self {
                Held::Rslock(g) => {
                    // rslock's release is best effort and reports nothing.
                    g.release().await;
                    Ok(())
                }
                Held::DistributedLockRedis(h) => {
                    use distributed_lock_core::traits::LockHandle;
                    h.release().await.map_err(BenchError::driver("distributed-lock-redis release"))
                }
                Held::DistributedLockMysql(h) => {
                    use distributed_lock_core::traits::LockHandle;
                    h.release().await.map_err(BenchError::driver("distributed-lock-mysql release"))
                }
                Held::DistributedLockPostgres(h) => {
                    use distributed_lock_core::traits::LockHandle;
                    h.release().await.map_err(BenchError::driver("distributed-lock-postgres release"))
                }
            }
        }
    }
}
