//! The conformance suite on the Redis backend, once per mode (the interop modes too), against a real redis-server
//! (`lock_testkit::server::shared_redis`, or `LOCK_TEST_REDIS_URL`).
//!
//! `sever` deletes the lock key behind the holder's back; the `*_killed` variants
//! `CLIENT KILL` the holder's connection first, so the loss is discovered across a reconnect.

use std::sync::Arc;
use std::time::Duration;

use lock_core::async_trait;
use lock_redis::redis::{self, aio::ConnectionManager};
use lock_redis::{Mode, RedisLock};
use lock_testkit::server::{external_url, shared_redis};
use lock_testkit::{Client, ClientFaults, Factory, FaultResult};

/// Prefix of every key these tests write.
const PREFIX: &str = "dlock-test:";

struct RedisFactory {
    mode: Mode,
    url: String,
    admin: ConnectionManager,
}

async fn factory(mode: Mode) -> RedisFactory {
    let url = external_url("redis").unwrap_or_else(|| shared_redis().url());
    let admin = redis::Client::open(url.as_str())
        .expect("url")
        .get_connection_manager()
        .await
        .expect("admin connection");
    RedisFactory { mode, url, admin }
}

#[async_trait]
impl Factory for RedisFactory {
    fn label(&self) -> String {
        format!("redis/{:?}", self.mode)
    }

    async fn client(&self) -> Client {
        let lock = RedisLock::builder()
            .url(&self.url)
            .mode(self.mode)
            .key_prefix(PREFIX)
            .fair_waiter_timeout(Duration::from_secs(1))
            .build()
            .await
            .expect("redis backend");
        let faults = Admin { admin: self.admin.clone(), holder: lock.clone() };
        Client::with_faults(Arc::new(lock), faults)
    }
}

/// An administrator's connection, aimed at one client (lease-based: keeping its connection
/// open does not keep its locks).
struct Admin {
    admin: ConnectionManager,
    holder: RedisLock,
}

#[async_trait]
impl ClientFaults for Admin {
    async fn sever(&self, key: &str) -> FaultResult {
        let lock = self.holder.key_names(key).lock;
        let deleted: i64 =
            redis::cmd("DEL").arg(&lock).query_async(&mut self.admin.clone()).await.expect("del");
        assert_eq!(deleted, 1, "sever: {lock} does not exist");
        Ok(())
    }

    async fn cut_connection(&self, _key: &str) -> FaultResult {
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

mod simple {
    lock_testkit::conformance_tests!(crate::factory(lock_redis::Mode::Simple).await);
    lock_testkit::primitive_tests!(crate::factory(lock_redis::Mode::Simple).await);
}

mod reentrant {
    lock_testkit::conformance_tests!(crate::factory(lock_redis::Mode::Reentrant).await);
    lock_testkit::primitive_tests!(crate::factory(lock_redis::Mode::Reentrant).await);
}

mod fair {
    lock_testkit::conformance_tests!(crate::factory(lock_redis::Mode::Fair).await);
    lock_testkit::primitive_tests!(crate::factory(lock_redis::Mode::Fair).await);
}

/// The interop layouts (a plain `SET NX PX` key shared with redis-py / python-redis-lock).
mod redis_py {
    lock_testkit::conformance_tests!(crate::factory(lock_redis::Mode::RedisPy).await);
}

mod python_redis_lock {
    lock_testkit::conformance_tests!(crate::factory(lock_redis::Mode::PythonRedisLock).await);
}

/// The cases that sever a hold, with the holder's connection killed first.
mod simple_killed {
    use lock_testkit::{LoseBy, Loss};
    lock_testkit::conformance_tests!(@cases LoseBy::new(crate::factory(lock_redis::Mode::Simple).await, Loss::CutThenSever);
        renew_extends_lease, lost_signal_fires);
}

mod fair_killed {
    use lock_testkit::{LoseBy, Loss};
    lock_testkit::conformance_tests!(@cases LoseBy::new(crate::factory(lock_redis::Mode::Fair).await, Loss::CutThenSever);
        renew_extends_lease, lost_signal_fires);
}
