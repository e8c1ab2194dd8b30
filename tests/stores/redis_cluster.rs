//! The Redis backend on a Redis Cluster (`redis+cluster://`): the conformance suite on a
//! 3-master cluster shared by this binary (`lock_redis_testing::try_shared_redis_cluster`),
//! the lock keys spread over all three masters, a lock followed through a slot migration
//! (`ASK`, then `MOVED`), and a master killed and replaced by its replica (a cluster of its own).
//!
//! `cut_connection` is not offered: the holder has a connection to every master, and killing
//! them all would cut the other tests sharing the cluster (those cases print `SKIPPED`).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use lock_core::{LockBackend, Locker};
use lock_redis::redis::{self, aio::ConnectionManager, cluster_async::ClusterConnection};
use lock_redis::{Mode, RedisLock};
use lock_redis_testing::{RedisCluster, try_shared_redis_cluster};

use crate::support;

use support::redis::{PREFIX, RedisFactory, assert_held_after_failover, backend, wait_for_replica};

fn shared() -> &'static RedisCluster {
    try_shared_redis_cluster().unwrap_or_else(|e| panic!("shared redis cluster: {e}"))
}

async fn admin(cluster: &RedisCluster) -> ClusterConnection {
    let nodes: Vec<String> = cluster.nodes().iter().map(|n| n.url()).collect();
    redis::cluster::ClusterClient::new(nodes)
        .expect("cluster client")
        .get_async_connection()
        .await
        .expect("admin cluster connection")
}

async fn factory(mode: Mode) -> RedisFactory<ClusterConnection> {
    let cluster = shared();
    RedisFactory {
        topology: "redis-cluster",
        mode,
        url: cluster.url(),
        admin: admin(cluster).await,
        cut: false,
    }
}

mod simple {
    lock_testkit::conformance_tests!(crate::redis_cluster::factory(lock_redis::Mode::Simple).await);
    lock_testkit::primitive_tests!(crate::redis_cluster::factory(lock_redis::Mode::Simple).await);
}

mod reentrant {
    lock_testkit::conformance_tests!(crate::redis_cluster::factory(lock_redis::Mode::Reentrant).await);
}

mod fair {
    lock_testkit::conformance_tests!(crate::redis_cluster::factory(lock_redis::Mode::Fair).await);
}

/// Every key of one lock is in the lock's slot, and different locks land on every master: the
/// suite above ran on all three.
#[tokio::test]
async fn keys_share_a_slot_and_spread_over_every_master() {
    let cluster = shared();
    let b = backend(&cluster.url(), Mode::Fair).await;
    let locker = Locker::new(Arc::new(b.clone()));
    let mut owners = BTreeSet::new();
    for i in 0..24 {
        let key = format!("spread/{i}");
        let n = b.key_names(&key);
        let slot = cluster.keyslot(n.lock()).expect("keyslot");
        for other in [n.fence(), n.queue(), n.waiters(), n.channel()] {
            assert_eq!(
                cluster.keyslot(other).expect("keyslot"),
                slot,
                "{other} is not in {}'s slot",
                n.lock()
            );
        }
        owners.insert(cluster.owner_of_slot(slot).expect("slot map").expect("slot owned"));
        let g = locker
            .lock(&key)
            .lease(Duration::from_secs(5))
            .try_acquire()
            .await
            .expect("acquire")
            .expect("free");
        assert!(g.fence().is_some());
        g.release().await.expect("release");
    }
    let masters: BTreeSet<usize> = cluster.masters().expect("masters").into_iter().collect();
    assert_eq!(masters.len(), 3);
    assert_eq!(owners, masters, "24 keys did not reach every master");
}

/// The interop modes are refused on a cluster: the other library's key has no hash tag.
#[tokio::test]
async fn interop_modes_are_refused() {
    for mode in [Mode::RedisPy, Mode::PythonRedisLock] {
        let e = RedisLock::builder().url(shared().url()).mode(mode).build().await.expect_err("refused");
        assert!(matches!(e, lock_core::LockError::InvalidConfig { .. }), "{e:?}");
    }
}

/// A waiter on a cluster wakes from the release's sharded message: with a waiter timeout of a
/// minute its heartbeat (20 s) is far beyond the test, so only the message can wake it.
#[tokio::test]
async fn a_release_wakes_a_waiter_through_sharded_pubsub() {
    let url = shared().url();
    let make = || async {
        RedisLock::builder()
            .url(&url)
            .key_prefix(PREFIX)
            .fair_waiter_timeout(Duration::from_secs(60))
            .build()
            .await
            .expect("backend")
    };
    let (a, b) = (Locker::new(Arc::new(make().await)), Locker::new(Arc::new(make().await)));
    for i in 0..3 {
        let key = format!("wake/{i}");
        let held =
            a.lock(&key).lease(Duration::from_secs(60)).try_acquire().await.expect("acquire").expect("free");
        let waiter = tokio::spawn({
            let b = b.clone();
            async move { b.lock(&key).lease(Duration::from_secs(5)).wait(Duration::from_secs(15)).acquire().await }
        });
        // Released only once the waiter is queued on the server.
        wait_for_waiters(&a, held.key(), 1).await;
        held.release().await.expect("release");
        let g = waiter.await.expect("join").expect("woken and granted");
        g.release().await.expect("release");
    }
}

async fn wait_for_waiters(locker: &Locker, key: &str, n: usize) {
    for _ in 0..2000 {
        if locker.backend().inspect(key).await.expect("inspect").waiters == Some(n) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("{key}: {n} waiter(s) never registered");
}

/// A direct connection to node `i` (admin commands that address one node).
async fn node(cluster: &RedisCluster, i: usize) -> ConnectionManager {
    let url = format!("redis://127.0.0.1:{}/", cluster.node(i).port());
    redis::Client::open(url).expect("url").get_connection_manager().await.expect("node connection")
}

/// A lock is held while its slot moves to another master: during the migration the lock's
/// keys are moved with `MIGRATE`, so the source answers `ASK` and the client follows it to the
/// target; after `CLUSTER SETSLOT .. NODE` the source answers `MOVED`. The holder releases,
/// another client takes the lock with a larger fence, on the new owner.
#[tokio::test]
async fn a_lock_follows_its_slot_through_a_migration() {
    let cluster = shared();
    let (a, b) = (backend(&cluster.url(), Mode::Simple).await, backend(&cluster.url(), Mode::Simple).await);
    let (la, lb) = (Locker::new(Arc::new(a.clone())), Locker::new(Arc::new(b.clone())));
    let key = "migrating";
    let names = a.key_names(key);
    let slot = cluster.keyslot(names.lock()).expect("keyslot");
    let src = cluster.owner_of_slot(slot).expect("map").expect("owner");
    let dst = *cluster.masters().expect("masters").iter().find(|&&m| m != src).expect("another master");
    let (src_id, dst_id) = (cluster.node_id(src).expect("id"), cluster.node_id(dst).expect("id"));
    let slot_s = slot.to_string();

    let held =
        la.lock(key).lease(Duration::from_secs(30)).try_acquire().await.expect("acquire").expect("free");
    let first = held.fence().expect("fence");
    cluster.command(dst, &["CLUSTER", "SETSLOT", &slot_s, "IMPORTING", &src_id]).expect("importing");
    cluster.command(src, &["CLUSTER", "SETSLOT", &slot_s, "MIGRATING", &dst_id]).expect("migrating");
    let mut src_conn = node(cluster, src).await;
    let keys: Vec<String> = redis::cmd("CLUSTER")
        .arg("GETKEYSINSLOT")
        .arg(slot)
        .arg(100)
        .query_async(&mut src_conn)
        .await
        .expect("keys in slot");
    assert!(keys.iter().any(|k| k == names.lock()) && keys.iter().any(|k| k == names.fence()), "{keys:?}");
    let _: () = redis::cmd("MIGRATE")
        .arg("127.0.0.1")
        .arg(cluster.node(dst).port())
        .arg("")
        .arg(0)
        .arg(5000)
        .arg("KEYS")
        .arg(&keys)
        .query_async(&mut src_conn)
        .await
        .expect("migrate");
    // The keys are gone from the source, which still owns the slot: it answers ASK, and the
    // renewal (one key) is followed to the target.
    held.renew(Duration::from_secs(30)).await.expect("renew through ASK");
    // A script over the lock's keys of which some (the empty queue) exist on neither node is
    // refused with TRYAGAIN until the migration ends: a temporary error, never a grant.
    match lb.try_lock(key).await {
        Ok(None) => {}
        Ok(Some(_)) => panic!("granted a held lock during the migration"),
        Err(e) => assert!(e.is_temporary(), "{e:?}"),
    }
    for i in cluster.masters().expect("masters") {
        cluster.command(i, &["CLUSTER", "SETSLOT", &slot_s, "NODE", &dst_id]).expect("setslot node");
    }
    // The slot is the target's now: MOVED for the clients whose map is stale.
    let info = b.inspect(key).await.expect("inspect through MOVED");
    assert_eq!(info.fence, Some(first), "the fence counter moved with the lock");
    assert!(lb.try_lock(key).await.expect("attempt").is_none(), "granted a held lock after the migration");
    held.release().await.expect("release through MOVED");
    let g = lb.lock(key).lease(Duration::from_secs(5)).try_acquire().await.expect("acquire").expect("free");
    assert!(g.fence().expect("fence") > first, "fence went backwards across the migration");
    g.release().await.expect("release");
    assert_eq!(cluster.owner_of_slot(slot).expect("map"), Some(dst));
}

/// A master dies while a client holds a lock on it: until its replica is promoted, attempts
/// on that slot fail with temporary errors and none is granted; then the lock (replicated with
/// `WAIT` before the kill, so the promoted replica has it) is still held, its holder releases
/// it, and another client gets it with a larger fence.
#[tokio::test]
async fn a_killed_master_fails_over_to_its_replica() {
    let Some(cluster) =
        lock_testkit::server::or_skip("redis cluster with replicas", RedisCluster::start(3, 1))
    else {
        return;
    };
    let url = cluster.url();
    let (a, b) = (backend(&url, Mode::Simple).await, backend(&url, Mode::Simple).await);
    let (la, lb) = (Locker::new(Arc::new(a.clone())), Locker::new(Arc::new(b.clone())));
    let key = "failover";
    let slot = cluster.keyslot(a.key_names(key).lock()).expect("keyslot");
    let master = cluster.owner_of_slot(slot).expect("map").expect("owner");
    let held =
        la.lock(key).lease(Duration::from_secs(60)).try_acquire().await.expect("acquire").expect("free");
    let first = held.fence().expect("fence");
    wait_for_replica(&cluster.node(master).url()).await;

    cluster.node(master).kill().expect("kill master");
    let (mut refused, mut attempts) = (0, 0);
    let promoted = async {
        loop {
            attempts += 1;
            match lb.try_lock(key).await {
                Ok(None) => {}
                Ok(Some(_)) => panic!("granted a lock its holder still has"),
                Err(e) => {
                    assert!(e.is_temporary(), "not a temporary error: {e:?}");
                    refused += 1;
                }
            }
            if cluster.owner_of_slot(slot).ok().flatten().is_some_and(|o| o != master) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(30), promoted).await.expect("replica promoted");
    assert!(refused >= 1, "no attempt failed while the master was down ({attempts} attempts)");
    let cluster = tokio::task::spawn_blocking(move || {
        cluster.wait_ok(Duration::from_secs(30)).expect("cluster ok again");
        cluster
    })
    .await
    .expect("join");
    // Still held on the promoted replica: refused, not an error, once the map is new.
    assert_held_after_failover(&lb, key, 200).await;
    held.release().await.expect("release on the new master");
    let g = lb.lock(key).lease(Duration::from_secs(5)).try_acquire().await.expect("acquire").expect("free");
    assert!(g.fence().expect("fence") > first);
    g.release().await.expect("release");
    drop(cluster);
}

/// `dlock::from_url` takes the cluster URL with this crate's options.
#[tokio::test]
async fn from_url_connects_to_the_cluster() {
    let url = format!("{}?mode=fair&key_prefix={PREFIX}", shared().url());
    let backend = dlock::from_url(&url).await.expect("from_url");
    assert!(backend.identity().starts_with("redis+cluster://127.0.0.1:"), "{}", backend.identity());
    assert!(backend.capabilities().fair);
    let locker = Locker::new(backend);
    let g = locker
        .lock("from-url")
        .lease(Duration::from_secs(5))
        .try_acquire()
        .await
        .expect("acquire")
        .expect("free");
    g.release().await.expect("release");
    let e = dlock::from_url(&format!("{}?mode=redis-py", shared().url())).await.expect_err("interop refused");
    assert!(matches!(e, lock_core::LockError::InvalidConfig { .. }), "{e:?}");
}

/// One renewal of locks on every master: the backend batches them per slot (one script runs
/// in one slot), and every answer lands at its own item.
#[tokio::test]
async fn a_renewal_of_keys_on_every_master_renews_each() {
    let cluster = shared();
    let b = backend(&cluster.url(), Mode::Simple).await;
    let locker = Locker::new(Arc::new(b.clone()));
    let mut guards = Vec::new();
    for i in 0..12 {
        let key = format!("renew-many/{i}");
        guards.push(
            locker
                .lock(&key)
                .lease(Duration::from_secs(5))
                .try_acquire()
                .await
                .expect("acquire")
                .expect("free"),
        );
    }
    let stranger = lock_core::OwnerToken::random();
    let mut items: Vec<lock_core::backend::RenewItem<'_>> = guards
        .iter()
        .map(|g| lock_core::backend::RenewItem {
            key: g.key(),
            owner: g.owner(),
            lease: Duration::from_secs(10),
        })
        .collect();
    // Every other item names an owner that holds nothing.
    for it in items.iter_mut().skip(1).step_by(2) {
        it.owner = stranger;
    }
    let renewed = b.renew(&items).await.expect("renew");
    let want: Vec<bool> = (0..items.len()).map(|i| i % 2 == 0).collect();
    assert_eq!(renewed, want);
    for g in guards {
        g.release().await.expect("release");
    }
}
