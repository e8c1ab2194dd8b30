//! The conformance suite on the Redis backend, once per mode (the interop modes too), against a real redis-server
//! (`lock_redis_testing::shared_redis`, or `LOCK_TEST_REDIS_URL`).
//!
//! `sever` deletes the lock key behind the holder's back; the `*_killed` variants
//! `CLIENT KILL` the holder's connection first, so the loss is discovered across a reconnect.

use lock_redis::Mode;
use lock_redis::redis::{self, aio::ConnectionManager};
use lock_redis_testing::shared_redis;

use crate::support;

use support::redis::RedisFactory;

async fn factory(mode: Mode) -> RedisFactory<ConnectionManager> {
    let url = lock_redis_testing::external_url().unwrap_or_else(|| shared_redis().url());
    let admin = redis::Client::open(url.as_str())
        .expect("url")
        .get_connection_manager()
        .await
        .expect("admin connection");
    RedisFactory { topology: "redis", mode, url, admin, cut: true }
}

mod simple {
    lock_testkit::conformance_tests!(crate::redis::factory(lock_redis::Mode::Simple).await);
    lock_testkit::primitive_tests!(crate::redis::factory(lock_redis::Mode::Simple).await);
}

mod reentrant {
    lock_testkit::conformance_tests!(crate::redis::factory(lock_redis::Mode::Reentrant).await);
    lock_testkit::primitive_tests!(crate::redis::factory(lock_redis::Mode::Reentrant).await);
}

mod fair {
    lock_testkit::conformance_tests!(crate::redis::factory(lock_redis::Mode::Fair).await);
    lock_testkit::primitive_tests!(crate::redis::factory(lock_redis::Mode::Fair).await);
}

/// The interop layouts (a plain `SET NX PX` key shared with redis-py / python-redis-lock).
mod redis_py {
    lock_testkit::conformance_tests!(crate::redis::factory(lock_redis::Mode::RedisPy).await);
}

mod python_redis_lock {
    lock_testkit::conformance_tests!(crate::redis::factory(lock_redis::Mode::PythonRedisLock).await);
}

/// The cases that sever a hold, with the holder's connection killed first.
mod simple_killed {
    use lock_testkit::{LoseBy, Loss};
    lock_testkit::conformance_tests!(@cases LoseBy::new(crate::redis::factory(lock_redis::Mode::Simple).await, Loss::CutThenSever);
        renew_extends_lease, lost_signal_fires);
}

mod fair_killed {
    use lock_testkit::{LoseBy, Loss};
    lock_testkit::conformance_tests!(@cases LoseBy::new(crate::redis::factory(lock_redis::Mode::Fair).await, Loss::CutThenSever);
        renew_extends_lease, lost_signal_fires);
}

/// A latch whose store stops answering (its client's connections blackholed) answers by its
/// deadlines, not by the store's timeouts (`lock_testkit::stall`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latch_on_an_unreachable_store_answers_by_its_deadline() {
    let s = shared_redis();
    let connect = |url: String| async move { dlock::from_url(&url).await.expect("backend") };
    lock_testkit::stall::unreachable_latch_answers_in_time(&s.url(), s.port(), connect).await;
}
