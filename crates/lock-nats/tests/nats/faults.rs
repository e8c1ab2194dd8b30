//! What only this store has: a crashed holder's key freed by the bucket's TTL whatever lease
//! it asked for, the bucket's TTL shared by its clients, fences across a server restart,
//! credentials refused and never shown.

use std::time::Duration;

use lock_core::backend::{LockBackend, Notify};
use lock_core::{LockError, Locker};
use lock_nats::NatsLock;
use lock_nats_testing::{NatsFactory, NatsServer, shared};
use lock_testkit::server::{FaultControl, or_skip};
use lock_testkit::{Factory, eventually, key};
use tokio::time::Instant;

/// A holder that asked for a 30 s lease and crashed (its client dropped without a release)
/// blocks the key for the bucket's TTL only: its keeper died with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crashed_holder_is_freed_by_the_bucket_ttl() {
    let Some(f) = NatsFactory::on_shared() else { return };
    let k = key("crash");
    let other = f.client().await.locker();
    // The holder runs on a runtime of its own, which is then dropped with everything on it
    // (its keeper, its connection), as a killed process would be.
    let (endpoint, lease, hk) = (f.endpoint().to_owned(), f.lease(), k.clone());
    std::thread::spawn(move || {
        let rt = tokio::runtime::Runtime::new().expect("runtime");
        rt.block_on(async {
            let f = NatsFactory::new(endpoint, "conformance", lease);
            let holder = f.client().await.locker();
            let g = holder
                .lock(&hk)
                .lease(Duration::from_secs(30))
                .try_acquire()
                .await
                .expect("try")
                .expect("free");
            // Longer than the TTL: kept by the keeper while the holder lives.
            tokio::time::sleep(lease * 3).await;
            assert!(!g.is_lost(), "the keeper keeps a lease longer than the TTL");
            std::mem::forget(g);
        });
    })
    .join()
    .expect("the holder ran");
    assert!(other.try_lock(&k).await.expect("try").is_none(), "held past the TTL");
    let t = Instant::now();
    let g = other.lock(&k).wait(Duration::from_secs(10)).acquire().await.expect("freed by the TTL");
    assert!(t.elapsed() < f.lease() * 4, "freed after {:?}, TTL {:?}", t.elapsed(), f.lease());
    g.release().await.expect("release");
}

/// A holder whose runtime is starved (here its only thread is blocked) runs neither the keeper
/// that rewrites a lease longer than the TTL nor anything else, and the server frees the key at
/// the TTL: its guard reads lost from then on by itself, before another client can take the
/// key. (The generative checker saw a release answer "lost" while the guard still read held,
/// under a blackhole on a loaded machine.)
#[tokio::test]
async fn a_starved_holder_reads_its_hold_lost_at_the_bucket_ttl() {
    let Some(shared) = NatsFactory::on_shared() else { return };
    let ttl = Duration::from_millis(300);
    let f = NatsFactory::new(shared.endpoint().to_owned(), "starved", ttl);
    let k = key("starved");
    let holder = f.connect(f.endpoint()).await;
    let (mine, other) = (Locker::new(std::sync::Arc::new(holder.clone())), f.client().await.locker());
    let t = Instant::now();
    let g = mine.lock(&k).lease(ttl * 10).try_acquire().await.expect("try").expect("free");
    let deadline = g.lease_deadline().expect("a deadline");
    assert!(deadline <= t + ttl, "the guard's deadline is the server's, not its lease's");
    std::thread::sleep(ttl + Duration::from_millis(20));
    assert!(g.is_lost(), "past the bucket's TTL the server may have freed the key");
    let taken = other.lock(&k).wait(Duration::from_secs(5)).acquire().await.expect("freed by the TTL");
    assert!(taken.fence() > g.fence());
    taken.release().await.expect("release");
    // The core sends no release for a lost guard: the client's table lets the hold go itself.
    assert!(matches!(g.release().await, Err(LockError::LeaseLost { .. })));
    eventually(Duration::from_secs(2), "the lost hold leaves the table", || {
        let n = holder.held_count();
        async move { n == 0 }
    })
    .await;
}

/// Every client of a bucket shares its TTL: another one asked for is refused, none asked
/// takes the bucket's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bucket_ttl_is_shared_by_its_clients() {
    let Some(srv) = shared() else { return };
    let url = |q: &str| format!("nats://{}/ttl{q}", srv.endpoint());
    let first = NatsLock::from_url(&url("?lease_ttl=700ms")).await.expect("creates the bucket");
    assert_eq!(first.lease_ttl(), Duration::from_millis(700));
    let same = NatsLock::from_url(&url("")).await.expect("takes the bucket's TTL");
    assert_eq!(same.lease_ttl(), Duration::from_millis(700));
    match NatsLock::from_url(&url("?lease_ttl=2s")).await {
        Err(LockError::InvalidConfig { reason }) => assert!(reason.contains("700ms"), "{reason}"),
        other => panic!("another TTL must be refused, got {other:?}"),
    }
    assert_eq!(first.identity(), same.identity());
    assert!(first.identity().starts_with("nats://127.0.0.1:"), "{}", first.identity());
}

/// The bucket is on disk: a killed and restarted server keeps its revisions, so a grant after
/// the restart draws a larger fence than every one before it, and a hold survives it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fences_and_holds_survive_a_restart() {
    let Some(srv) = or_skip("nats", NatsServer::start()) else { return };
    let f = NatsFactory::new(srv.endpoint(), "restart", Duration::from_secs(2));
    let l = f.client().await.locker();
    let (held, k) = (key("restart-held"), key("restart"));
    let g = l.try_lock(&held).await.expect("try").expect("free");
    let mut last = 0;
    for _ in 0..5 {
        let g = l.try_lock(&k).await.expect("try").expect("free");
        last = g.fence().expect("fenced").0;
        g.release().await.expect("release");
    }
    srv.kill().expect("kill");
    srv.restart().expect("restart");
    let g2 = l.lock(&k).wait(Duration::from_secs(10)).acquire().await.expect("after the restart");
    assert!(g2.fence().expect("fenced").0 > last, "fence {:?} after {last}", g2.fence());
    assert!(Locker::new(f.client().await.backend).try_lock(&held).await.expect("try").is_none());
    g.release().await.expect("the hold outlived the restart");
    g2.release().await.expect("release");
}

/// A wrong password is `PermissionDenied`, and no error or `Debug` shows the password.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_credentials_are_refused_and_never_shown() {
    let Some(srv) = or_skip("nats", NatsServer::start_with(&["--user", "dl", "--pass", "s3cret"])) else {
        return;
    };
    let url = |pw: &str| format!("nats://dl:{pw}@{}/auth?lease_ttl=1s", srv.endpoint());
    let ok = NatsLock::from_url(&url("s3cret")).await.expect("right password");
    assert!(!format!("{ok:?}").contains("s3cret"));
    assert!(!ok.identity().contains("s3cret"));
    match NatsLock::from_url(&url("wr0ng")).await {
        Err(e @ LockError::PermissionDenied { .. }) => {
            assert!(!format!("{e} {e:?}").contains("wr0ng"), "{e:?}")
        }
        other => panic!("expected PermissionDenied, got {other:?}"),
    }
}

/// Waiters on many keys of one client share one watch, and a release wakes its waiter
/// through it (not by polling: the holder's lease is 30 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_watch_wakes_the_waiters_of_every_key() {
    let Some(f) = NatsFactory::on_shared() else { return };
    let (holder, waiter) = (f.client().await.locker(), std::sync::Arc::new(f.connect(f.endpoint()).await));
    let keys: Vec<String> = (0..4).map(|_| key("watch")).collect();
    let mut guards = Vec::new();
    for k in &keys {
        guards.push(
            holder.lock(k).lease(Duration::from_secs(30)).try_acquire().await.expect("try").expect("free"),
        );
    }
    let l = Locker::new(waiter.clone());
    let mut waits = tokio::task::JoinSet::new();
    for k in keys.clone() {
        let l = l.clone();
        waits.spawn(async move { l.lock(&k).wait(Duration::from_secs(10)).acquire().await });
    }
    lock_testkit::eventually(Duration::from_secs(5), "the watch is live", || {
        let live = waiter.listening(&keys[0]);
        async move { live }
    })
    .await;
    let t = Instant::now();
    for g in guards {
        g.release().await.expect("release");
    }
    while let Some(done) = waits.join_next().await {
        done.expect("task").expect("woken").release().await.expect("release");
    }
    assert!(t.elapsed() < Duration::from_secs(5), "woken after {:?}", t.elapsed());
    assert!(waiter.watch_events() >= 4, "{} delete events", waiter.watch_events());
}
