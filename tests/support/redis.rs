//! The Redis suites' fixture, the same on one server, a Cluster and a Sentinel-managed primary:
//! the backend as every case builds it, and an administrator's connection that breaks a
//! client's holds behind its back.

// Each binary uses the part its topology offers.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use lock_core::{Locker, async_trait};
use lock_redis::redis::{self, aio::ConnectionLike};
use lock_redis::{Mode, RedisLock};
use lock_testkit::{Client, ClientFaults, Factory, FaultResult, Unsupported};

/// Prefix of every key these tests write.
pub const PREFIX: &str = "dlock-test:";

/// A backend on `url` in `mode`, as the suites use it.
pub async fn backend(url: &str, mode: Mode) -> RedisLock {
    RedisLock::builder()
        .url(url)
        .mode(mode)
        .key_prefix(PREFIX)
        .fair_waiter_timeout(Duration::from_secs(1))
        .build()
        .await
        .unwrap_or_else(|e| panic!("redis backend on {url}: {e}"))
}

/// `WAIT 1 10000` on the server at `url` (a primary, or a cluster's master): its replica
/// acknowledged everything written so far, so a failover keeps it.
pub async fn wait_for_replica(url: &str) {
    let mut conn = redis::Client::open(url)
        .expect("url")
        .get_multiplexed_async_connection_with_config(
            &redis::AsyncConnectionConfig::new().set_response_timeout(None),
        )
        .await
        .expect("connection to the primary");
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(10_000).query_async(&mut conn).await.expect("wait");
    assert_eq!(acked, 1, "the replica did not acknowledge");
}

/// After a failover: `locker`'s attempts on `key` fail temporarily until the backend has found
/// the new primary (at most `attempts`, 20 ms apart); the first answer must refuse the lock,
/// which the promoted replica still holds.
pub async fn assert_held_after_failover(locker: &Locker, key: &str, attempts: usize) {
    let mut refused = None;
    for _ in 0..attempts {
        match locker.try_lock(key).await {
            Ok(r) => {
                refused = Some(r.is_none());
                break;
            }
            Err(e) => assert!(e.is_temporary(), "{e:?}"),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(refused, Some(true), "the promoted replica lost the replicated grant, or never answered");
}

/// Clients of one Redis topology, each with the administrator's connection `admin` (a
/// connection manager, or a cluster connection) aimed at it.
pub struct RedisFactory<C> {
    /// `redis`, `redis-cluster`, `redis-sentinel`: the label's first part.
    pub topology: &'static str,
    pub mode: Mode,
    pub url: String,
    pub admin: C,
    /// `CLIENT KILL` of the holder's connection is offered (not on a cluster: the holder has a
    /// connection to every master, and killing them all would cut the other tests sharing it).
    pub cut: bool,
}

#[async_trait]
impl<C: ConnectionLike + Clone + Send + Sync + 'static> Factory for RedisFactory<C> {
    fn label(&self) -> String {
        format!("{}/{:?}", self.topology, self.mode)
    }

    async fn client(&self) -> Client {
        let lock = backend(&self.url, self.mode).await;
        let faults = Admin { admin: self.admin.clone(), holder: lock.clone(), cut: self.cut };
        Client::with_faults(Arc::new(lock), faults)
    }
}

/// An administrator's connection, aimed at one client (lease-based: keeping its connection
/// open does not keep its locks).
struct Admin<C> {
    admin: C,
    holder: RedisLock,
    cut: bool,
}

#[async_trait]
impl<C: ConnectionLike + Clone + Send + Sync + 'static> ClientFaults for Admin<C> {
    async fn sever(&self, key: &str) -> FaultResult {
        // The lock, or its readers (`<lock>:s`, a native read-write lock's shared holds).
        let lock = self.holder.key_names(key).lock().to_owned();
        let readers = format!("{lock}:s");
        let deleted: i64 = redis::cmd("DEL")
            .arg(&lock)
            .arg(&readers)
            .query_async(&mut self.admin.clone())
            .await
            .expect("del");
        assert_eq!(deleted, 1, "sever: neither {lock} nor its readers exist");
        Ok(())
    }

    async fn cut_connection(&self, _key: &str) -> FaultResult {
        if !self.cut {
            return Err(Unsupported::new(
                "cut_connection",
                "the holder has a connection to every master; killing them all would cut the other tests",
            ));
        }
        let id: i64 =
            redis::cmd("CLIENT").arg("ID").query_async(&mut self.holder.connection()).await.expect("id");
        let killed: i64 = redis::cmd("CLIENT")
            .arg("KILL")
            .arg("ID")
            .arg(id)
            .query_async(&mut self.admin.clone())
            .await
            .expect("kill");
        assert_eq!(killed, 1, "holder connection not found");
        Ok(())
    }
}
