//! A master paused for 1-2x the client's response timeout while a nested release or an
//! acquisition is in flight (issue 26, point 2): the driver may send the request again (the
//! Cluster client retries a request that timed out; the Sentinel connection resends once
//! after a primary change) while the first copy waits in the paused server's socket, and both
//! run when it resumes. Every script is idempotent per attempt, so the outcome is that of one
//! run: the outer hold survives the nested release, and an acquisition counts once.
//! Each case uses a topology of its own: pausing the shared one would stall its other tests.

use std::sync::Arc;
use std::time::Duration;

use lock_core::{LockBackend, Locker, OwnerToken};
use lock_redis::{Mode, RedisLock};
use lock_redis_testing::{RedisCluster, RedisSentinelSet};
use lock_testkit::eventually;
use lock_testkit::server::or_skip;

use crate::support;

use support::redis::PREFIX;

const RESPONSE: Duration = Duration::from_millis(300);
const LONG: Duration = Duration::from_secs(60);

/// A backend with a short response timeout. A sentinel set just started has once answered
/// "master name not found" to the first client, so building is retried for a few seconds.
async fn backend(url: &str, mode: Mode) -> RedisLock {
    let build = || {
        RedisLock::builder()
            .url(url)
            .mode(mode)
            .key_prefix(PREFIX)
            .response_timeout(RESPONSE)
            .connection_timeout(RESPONSE)
            .build()
    };
    for _ in 0..50 {
        if let Ok(b) = build().await {
            return b;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    build().await.unwrap_or_else(|e| panic!("redis backend on {url}: {e}"))
}

/// Whether another client takes `key` now (`None`: no answer, the server is still catching up).
async fn taken_by_another(url: &str, mode: Mode, key: &str) -> Option<bool> {
    let other = Locker::new(Arc::new(backend(url, mode).await));
    match other.lock(key).lease(LONG).try_acquire().await {
        Ok(Some(g)) => {
            g.release().await.ok()?;
            Some(true)
        }
        Ok(None) => Some(false),
        Err(_) => None,
    }
}

/// Asks until another client answers (the paused server resumed and ran what it had queued).
async fn settled(url: &str, mode: Mode, key: &str) -> bool {
    for _ in 0..100 {
        if let Some(taken) = taken_by_another(url, mode, key).await {
            return taken;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{key}: no answer after the pause");
}

/// The nested release and then an acquisition, each with the server that holds `key` paused
/// by `pause` for 1.5x the response timeout and resumed by `resume`.
async fn nested_release_and_acquire_across_a_pause(
    url: &str,
    mode: Mode,
    pause: impl Fn(&str) + Copy,
    resume: impl Fn(&str) + Copy,
) {
    let b = backend(url, mode).await;
    let l = Locker::new(Arc::new(b.clone()));
    let owner = OwnerToken::random();
    let key = format!("resend-release-{mode}");
    let outer = l.lock(&key).owner(owner).lease(LONG).try_acquire().await.expect("try").expect("free");
    let inner = l.lock(&key).owner(owner).lease(LONG).try_acquire().await.expect("try").expect("nests");
    pause(b.key_names(&key).lock());
    let release = tokio::spawn(inner.release());
    tokio::time::sleep(RESPONSE * 2).await;
    resume(b.key_names(&key).lock());
    // Released or a temporary error: either way the outer hold is untouched.
    let unknown = match release.await.expect("task") {
        Ok(()) => false,
        Err(e) => {
            assert!(e.is_temporary(), "{e:?}");
            true
        }
    };
    assert!(!settled(url, mode, &key).await, "{mode}: the nested release ran twice and freed the outer hold");
    outer.release().await.expect("outer release");
    if unknown {
        // The nested release's fate was unknown (the request may have been lost with the
        // connection): the caller releases again, a no-op if it did run.
        LockBackend::release(&b, &key, owner).await.expect("release again");
    }
    assert!(settled(url, mode, &key).await, "{mode}: the outer release frees the key");

    let key = format!("resend-acquire-{mode}");
    pause(b.key_names(&key).lock());
    let (lc, k) = (l.clone(), key.clone());
    let acquire = tokio::spawn(async move { lc.lock(k).owner(owner).lease(LONG).try_acquire().await });
    tokio::time::sleep(RESPONSE * 2).await;
    resume(b.key_names(&key).lock());
    match acquire.await.expect("task") {
        // Granted once: the one release frees the key.
        Ok(Some(g)) => g.release().await.expect("release"),
        Ok(None) => panic!("{mode}: refused on a free key"),
        // Unknown outcome: the attempt's cleanup undoes what it did, however often it ran.
        Err(e) => assert!(e.is_temporary(), "{e:?}"),
    }
    eventually(Duration::from_secs(5), "the key is free after one release or the cleanup", || {
        let (url, key) = (url.to_owned(), key.clone());
        async move { taken_by_another(&url, mode, &key).await == Some(true) }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_master_paused_during_a_nested_release_and_an_acquire() {
    let Some(cluster) = or_skip("redis cluster", RedisCluster::start(3, 0)) else { return };
    // The master is looked up before the pause: the lookup may need the paused node.
    let paused = std::sync::Mutex::new(None);
    let pause = |lock: &str| {
        let slot = cluster.keyslot(lock).expect("keyslot");
        let master = cluster.owner_of_slot(slot).expect("map").expect("owner");
        cluster.node(master).pause().expect("pause");
        *paused.lock().expect("paused") = Some(master);
    };
    let resume = |_: &str| {
        let master = paused.lock().expect("paused").take().expect("a paused master");
        cluster.node(master).resume().expect("resume");
    };
    for mode in [Mode::Reentrant, Mode::Fair] {
        nested_release_and_acquire_across_a_pause(&cluster.url(), mode, pause, resume).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_primary_paused_during_a_nested_release_and_an_acquire() {
    let Some(set) = or_skip("redis sentinel", RedisSentinelSet::start()) else { return };
    let primary = set.primary().expect("primary");
    for mode in [Mode::Reentrant, Mode::Fair] {
        nested_release_and_acquire_across_a_pause(
            &set.url(),
            mode,
            |_| set.servers()[primary].pause().expect("pause"),
            |_| set.servers()[primary].resume().expect("resume"),
        )
        .await;
    }
}
