//! The Redis backend through Redis Sentinel (`redis+sentinel://sentinels/master-name`): the
//! conformance suite on a primary + replica watched by three sentinels, shared by this binary
//! (`lock_redis_testing::try_shared_redis_sentinel`), and a failover of a set of its own: the
//! primary killed while a lock is held and a waiter waits; after the replica's promotion the
//! backend follows it and the lock works again.

use std::sync::Arc;
use std::time::Duration;

use lock_core::{LockBackend, Locker};
use lock_redis::Mode;
use lock_redis::redis::{self, aio::ConnectionManager};
use lock_redis_testing::{RedisSentinelSet, try_shared_redis_sentinel};
use lock_testkit::server::or_skip;

use crate::support;

use support::redis::{PREFIX, RedisFactory, assert_held_after_failover, backend, wait_for_replica};

fn shared() -> &'static RedisSentinelSet {
    try_shared_redis_sentinel().unwrap_or_else(|e| panic!("shared redis sentinel set: {e}"))
}

/// A direct connection to the primary of `set` now.
async fn primary(set: &RedisSentinelSet) -> ConnectionManager {
    let p = set.primary().expect("primary");
    redis::Client::open(set.servers()[p].url()).expect("url").get_connection_manager().await.expect("primary")
}

async fn factory(mode: Mode) -> RedisFactory<ConnectionManager> {
    let set = shared();
    RedisFactory { topology: "redis-sentinel", mode, url: set.url(), admin: primary(set).await, cut: true }
}

mod simple {
    lock_testkit::conformance_tests!(crate::redis_sentinel::factory(lock_redis::Mode::Simple).await);
    lock_testkit::primitive_tests!(crate::redis_sentinel::factory(lock_redis::Mode::Simple).await);
}

mod fair {
    lock_testkit::conformance_tests!(crate::redis_sentinel::factory(lock_redis::Mode::Fair).await);
}

/// The cases that sever a hold, with the holder's connection killed first.
mod simple_killed {
    use lock_testkit::{LoseBy, Loss};
    lock_testkit::conformance_tests!(@cases LoseBy::new(crate::redis_sentinel::factory(lock_redis::Mode::Simple).await, Loss::CutThenSever);
        renew_extends_lease, lost_signal_fires);
}

/// `identity` names the sentinels and the primary's name, never the primary's address (which
/// a failover changes).
#[tokio::test]
async fn identity_names_the_sentinels_and_the_master() {
    let set = shared();
    let b = backend(&set.url(), Mode::Simple).await;
    let id = b.identity();
    assert!(
        id.starts_with("redis+sentinel://") && id.contains(lock_redis_testing::SENTINEL_MASTER_NAME),
        "{id}"
    );
    let primary_port = set.servers()[set.primary().expect("primary")].port().to_string();
    assert!(!id.contains(&primary_port), "{id}");
}

/// Kill the primary while a lock is held and another client waits for it. The grant was
/// replicated (`WAIT`) before the kill, so the promoted replica still has it: until the
/// promotion attempts fail with temporary errors, none is granted; after it the holder renews
/// and releases on the new primary, the waiter is granted (a larger fence), and a third client
/// built before the failover locks and unlocks too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_primary_is_followed_to_the_promoted_replica() {
    let Some(set) = or_skip(
        "redis sentinel set",
        tokio::task::spawn_blocking(RedisSentinelSet::start).await.expect("join"),
    ) else {
        return;
    };
    let url = set.url();
    let (a, b, c) =
        (backend(&url, Mode::Fair).await, backend(&url, Mode::Fair).await, backend(&url, Mode::Fair).await);
    let (la, lb, lc) = (
        Locker::new(Arc::new(a.clone())),
        Locker::new(Arc::new(b.clone())),
        Locker::new(Arc::new(c.clone())),
    );
    let key = "failover";
    let held =
        la.lock(key).lease(Duration::from_secs(60)).try_acquire().await.expect("acquire").expect("free");
    let first = held.fence().expect("fence");
    let waiter = tokio::spawn(async move {
        lb.lock(key).lease(Duration::from_secs(5)).wait(Duration::from_secs(40)).acquire().await
    });
    // The waiter is queued, and the grant and the queue are on the replica, before the kill.
    for i in 0.. {
        if a.inspect(key).await.expect("inspect").waiters == Some(1) {
            break;
        }
        assert!(i < 2000, "the waiter never queued");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let old = set.primary().expect("primary");
    wait_for_replica(&set.servers()[old].url()).await;

    set.servers()[old].kill().expect("kill primary");
    // Right after the kill nothing can have been promoted: the attempt fails, temporarily.
    let e = lc.try_lock(key).await.expect_err("the primary is dead");
    assert!(e.is_temporary(), "{e:?}");
    let set = tokio::task::spawn_blocking(move || {
        set.wait_for_failover(old, Duration::from_secs(30)).expect("promotion");
        set
    })
    .await
    .expect("join");
    // The backend finds the new primary on its next failure; the lock is still held there.
    assert_held_after_failover(&lc, key, 500).await;
    assert!(!waiter.is_finished(), "the waiter was granted while the holder still held the lock");
    // A release resent once the client has found the new primary finds its own release mark
    // and answers released, so the release is strict here.
    held.release().await.expect("release on the new primary");
    let g = waiter.await.expect("join").expect("the waiter is granted after the failover");
    assert!(g.fence().expect("fence") > first, "fence went backwards across the failover");
    g.release().await.expect("release");
    let g =
        lc.lock("after").lease(Duration::from_secs(5)).try_acquire().await.expect("acquire").expect("free");
    g.release().await.expect("release");
    drop(set);
}

/// `dlock::from_url` takes the sentinel URL with this crate's options.
#[tokio::test]
async fn from_url_connects_through_the_sentinels() {
    let url = format!("{}?mode=reentrant&key_prefix={PREFIX}", shared().url());
    let backend = dlock::from_url(&url).await.expect("from_url");
    assert!(backend.capabilities().reentrant);
    let locker = Locker::new(backend);
    let g = locker
        .lock("from-url")
        .lease(Duration::from_secs(5))
        .try_acquire()
        .await
        .expect("acquire")
        .expect("free");
    g.release().await.expect("release");
}
