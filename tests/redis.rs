//! The conformance suite on the Redis backend, once per mode, against a real redis-server
//! (`lock_testkit::server::shared_redis`, or `LOCK_TEST_REDIS_URL`).
//!
//! `sever` deletes the lock key behind the holder's back; the `*_killed` variants also
//! `CLIENT KILL` the holder's connection first, so the loss is discovered across a reconnect.

use std::sync::{Arc, Mutex};

use lock_core::LockBackend;
use lock_core::async_trait;
use lock_redis::redis::{self, aio::ConnectionManager};
use lock_redis::{Mode, RedisLock};
use lock_testkit::Factory;
use lock_testkit::server::{external_url, shared_redis};

/// Prefix of every key these tests write.
const PREFIX: &str = "dlock-test:";

fn server_url() -> String {
    external_url("redis").unwrap_or_else(|| shared_redis().url())
}

struct RedisFactory {
    mode: Mode,
    kill_connection: bool,
    url: String,
    admin: ConnectionManager,
    clients: Mutex<Vec<(Arc<dyn LockBackend>, RedisLock)>>,
}

async fn factory(mode: Mode, kill_connection: bool) -> RedisFactory {
    let url = server_url();
    let admin = redis::Client::open(url.as_str())
        .expect("url")
        .get_connection_manager()
        .await
        .expect("admin connection");
    RedisFactory { mode, kill_connection, url, admin, clients: Mutex::default() }
}

fn same(a: &Arc<dyn LockBackend>, b: &Arc<dyn LockBackend>) -> bool {
    std::ptr::addr_eq(Arc::as_ptr(a), Arc::as_ptr(b))
}

#[async_trait]
impl Factory for RedisFactory {
    fn label(&self) -> String {
        let kill = if self.kill_connection { "+client-kill" } else { "" };
        format!("redis/{:?}{kill}", self.mode)
    }

    async fn client(&self) -> Arc<dyn LockBackend> {
        let lock = RedisLock::builder()
            .url(&self.url)
            .mode(self.mode)
            .key_prefix(PREFIX)
            .fair_waiter_timeout(std::time::Duration::from_secs(1))
            .build()
            .await
            .expect("redis backend");
        let dynamic: Arc<dyn LockBackend> = Arc::new(lock.clone());
        self.clients.lock().expect("clients").push((dynamic.clone(), lock));
        dynamic
    }

    async fn sever(&self, holder: &Arc<dyn LockBackend>, key: &str) -> bool {
        let Some(lock) = self
            .clients
            .lock()
            .expect("clients")
            .iter()
            .find(|(d, _)| same(d, holder))
            .map(|(_, l)| l.clone())
        else {
            return false;
        };
        let mut admin = self.admin.clone();
        if self.kill_connection {
            let id: i64 =
                redis::cmd("CLIENT").arg("ID").query_async(&mut lock.connection()).await.expect("id");
            let killed: i64 = redis::cmd("CLIENT")
                .arg("KILL")
                .arg("ID")
                .arg(id)
                .query_async(&mut admin)
                .await
                .expect("kill");
            assert_eq!(killed, 1, "holder connection not found");
        }
        let deleted: i64 =
            redis::cmd("DEL").arg(lock.key_names(key).lock).query_async(&mut admin).await.expect("del");
        deleted == 1
    }
}

mod simple {
    lock_testkit::conformance_tests!(crate::factory(lock_redis::Mode::Simple, false).await);
}

mod reentrant {
    lock_testkit::conformance_tests!(crate::factory(lock_redis::Mode::Reentrant, false).await);
}

mod fair {
    lock_testkit::conformance_tests!(crate::factory(lock_redis::Mode::Fair, false).await);
}

/// The cases that call `sever`, with the holder's connection killed as well.
mod simple_killed {
    lock_testkit::conformance_tests!(@cases crate::factory(lock_redis::Mode::Simple, true).await;
        renew_extends_lease, lost_signal_fires);
}

mod fair_killed {
    lock_testkit::conformance_tests!(@cases crate::factory(lock_redis::Mode::Fair, true).await;
        renew_extends_lease, lost_signal_fires);
}
