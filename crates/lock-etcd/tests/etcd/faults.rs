//! etcd-specific behaviour and faults: no herd effect and FIFO order, a revoked lease, a paused
//! server, a leader killed in a 3-member cluster, a dropped acquisition, least privilege.
//!
//! Tests that stop or kill a server start their own; the others share this binary's server.
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use lock_core::{LeaseState, LockBackend, LockError, LockGuard, LostReason};
use lock_etcd::EtcdLock;
use lock_etcd::etcd_client as etcd;
use lock_etcd_testing::{EtcdCluster, EtcdServer};
use lock_testkit::server;
use lock_testkit::{eventually, key, within};
use tokio::time::{Instant, timeout};

use crate::common;

use common::{TTL, locker, queued};

async fn etcd_lock(endpoints: &[String], ttl: Duration) -> EtcdLock {
    common::etcd_lock(endpoints.iter().cloned(), "/faults", ttl, Duration::from_secs(2)).await
}

fn shared() -> Vec<String> {
    vec![lock_etcd_testing::shared_etcd().endpoint()]
}

/// A holder whose runtime is starved (its only thread blocked here) sends no keep-alive and runs
/// no deadline keeper, and the server may end its lease a TTL after the last keep-alive: the
/// guard reads lost from then on by itself, before anyone else can be granted the lock, with no
/// task to tell it.
#[tokio::test]
async fn a_starved_holder_reads_its_hold_lost_at_the_lease_ttl() {
    let holder = etcd_lock(&shared(), TTL).await;
    let g = locker(&holder).try_lock(&key("starved")).await.expect("try").expect("free");
    let deadline = g.lease_deadline().expect("the lease's deadline");
    assert!(deadline <= Instant::now() + TTL, "within a TTL");
    std::thread::sleep(deadline.saturating_duration_since(Instant::now()) + Duration::from_millis(10));
    assert!(g.is_lost(), "past the lease's deadline the server may have ended it");
}

/// Ten waiters queue behind a holder; every release wakes exactly one waiter (counted on the
/// clients' predecessor watches), and they are served in arrival order (fair FIFO).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_release_wakes_exactly_the_next_waiter() {
    const WAITERS: usize = 10;
    let endpoints = shared();
    let k = key("herd");
    let holder = etcd_lock(&endpoints, TTL).await;
    let prefix = holder.lock_prefix(&k);
    let g = locker(&holder).try_lock(&k).await.expect("try").expect("free");
    let observer = holder.client();

    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(usize, LockGuard)>();
    let mut clients = Vec::new();
    for i in 0..WAITERS {
        let e = etcd_lock(&endpoints, TTL).await;
        clients.push(e.clone());
        let (l, k, tx) = (locker(&e), k.clone(), tx.clone());
        tokio::spawn(async move {
            let g = l.lock(&k).wait(Duration::from_secs(60)).acquire().await.expect("waiter acquires");
            tx.send((i, g)).expect("test alive");
        });
        // Queue strictly one after another, so arrival order is known.
        eventually(Duration::from_secs(5), "waiter queued", || {
            let c = observer.clone();
            let prefix = prefix.clone();
            async move { queued(&c, &prefix).await == i + 2 }
        })
        .await;
    }
    let wakeups = || clients.iter().map(EtcdLock::watch_wakeups).sum::<u64>();
    assert_eq!(wakeups(), 0, "no waiter may wake before the first release");

    let mut fences = vec![g.fence()];
    g.release().await.expect("release");
    let mut order = Vec::new();
    for step in 0..WAITERS {
        let (i, g) = within(Duration::from_secs(10), "next waiter", rx.recv()).await.expect("channel");
        order.push(i);
        fences.push(g.fence());
        assert_eq!(wakeups(), step as u64 + 1, "release {step} woke more than one waiter");
        assert_eq!(queued(&observer, &prefix).await, WAITERS - step, "queue length after hand-over {step}");
        g.release().await.expect("release");
    }
    assert_eq!(order, (0..WAITERS).collect::<Vec<_>>(), "waiters were not served in arrival order");
    assert!(fences.windows(2).all(|w| w[0] < w[1]), "fences increase: {fences:?}");
    assert_eq!(queued(&observer, &prefix).await, 0, "no key left behind");
}

/// The holder's lease is revoked from another client: every hold of that client is lost
/// (session ended), and the client goes on under a new lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoked_lease_loses_every_hold_of_the_client() {
    let endpoints = shared();
    let holder = etcd_lock(&endpoints, TTL).await;
    let l = locker(&holder);
    let (k1, k2) = (key("revoke"), key("revoke"));
    let g1 = l.lock(&k1).lease(Duration::from_secs(30)).try_acquire().await.expect("try").expect("free");
    let g2 = l.try_lock(&k2).await.expect("try").expect("free");
    let old = holder.lease_id();
    let mut admin = etcd::Client::connect(&endpoints, None).await.expect("admin");
    admin.lease_revoke(old).await.expect("revoke");
    for g in [&g1, &g2] {
        within(Duration::from_secs(3), "lost after the revoke", g.lost()).await;
        assert_eq!(g.state(), LeaseState::Lost(LostReason::SessionEnded));
    }
    let other = locker(&etcd_lock(&endpoints, TTL).await);
    let g3 = other.try_lock(&k1).await.expect("try").expect("the revoke freed the key");
    assert!(g3.fence() > g1.fence(), "fence after the revoke");
    assert!(matches!(g1.release().await, Err(LockError::LeaseLost { .. })));
    g3.release().await.expect("release");
    let g4 = l.try_lock(&k1).await.expect("the old client goes on").expect("free");
    assert_ne!(holder.lease_id(), old, "under a new lease");
    g4.release().await.expect("release");
}

/// The server is frozen (SIGSTOP): the holder's keep-alive goes unanswered, so it is uncertain
/// at once and lost within a TTL of the last confirmed keep-alive's send (less the drift
/// margin), before the server could expire the lease; after the resume another client gets
/// the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_server_uncertain_then_lost_before_another_holds() {
    let Some(srv) = server::or_skip("etcd", EtcdServer::start()) else { return };
    let endpoints = vec![srv.endpoint()];
    let k = key("pause");
    let holder = etcd_lock(&endpoints, TTL).await;
    let ttl = holder.lease_ttl();
    let g = locker(&holder).try_lock(&k).await.expect("try").expect("free");
    let mut states = g.state_changes();
    let fired = tokio::spawn({
        let lost = g.lost();
        async move {
            lost.await;
            Instant::now()
        }
    });

    srv.pause().expect("SIGSTOP");
    let paused = Instant::now();
    within(
        Duration::from_secs(5),
        "uncertain while the server is frozen",
        states.wait_for(|s| *s == LeaseState::Uncertain),
    )
    .await
    .expect("signal alive");
    let uncertain_after = paused.elapsed();
    let lost_at =
        within(Duration::from_secs(5), "lost while the server is frozen", fired).await.expect("task");
    let lost_after = lost_at - paused;
    println!("paused server: uncertain after {uncertain_after:?}, lost after {lost_after:?} (ttl {ttl:?})");
    assert_eq!(g.state(), LeaseState::Lost(LostReason::DeadlinePassed));
    assert!(lost_after < ttl, "told {lost_after:?} after the pause, ttl {ttl:?}");

    srv.resume().expect("SIGCONT");
    let other = locker(&etcd_lock(&endpoints, TTL).await);
    let g2 = other.lock(&k).wait(Duration::from_secs(10)).acquire().await.expect("another client acquires");
    assert!(lost_at < Instant::now(), "lost before the other client held");
    assert!(g2.fence() > g.fence(), "fence increases");
    assert!(matches!(g.release().await, Err(LockError::LeaseLost { .. })));
    g2.release().await.expect("release");
}

/// A 3-member cluster: the leader is killed while a lock is held and two clients wait. Never two
/// holders, the fencing token still increases, and the lock works again after the re-election
/// (and after the killed member is back).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_leader_killed_while_held_and_waited() {
    let Some(cluster) = server::or_skip("etcd cluster", EtcdCluster::start()) else { return };
    let endpoints = cluster.endpoints();
    let leader = cluster.wait_for_leader(Duration::from_secs(30)).expect("leader");
    let k = key("failover");
    // A lease long enough to ride out the election.
    let ttl = Duration::from_secs(3);
    let holder = etcd_lock(&endpoints, ttl).await;
    let g = locker(&holder).try_lock(&k).await.expect("try").expect("free");
    let inside = Arc::new(AtomicUsize::new(1));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<LockGuard>();
    let mut waiters = Vec::new();
    for _ in 0..2 {
        let l = locker(&etcd_lock(&endpoints, ttl).await);
        let (k, tx, inside) = (k.clone(), tx.clone(), inside.clone());
        waiters.push(tokio::spawn(async move {
            let g = l.lock(&k).wait(Duration::from_secs(60)).acquire().await.expect("waiter acquires");
            assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two holders at once");
            tx.send(g).expect("test alive");
        }));
    }
    let observer = holder.client();
    let prefix = holder.lock_prefix(&k);
    eventually(Duration::from_secs(10), "both waiters queued", || {
        let c = observer.clone();
        let prefix = prefix.clone();
        async move { queued(&c, &prefix).await == 3 }
    })
    .await;

    cluster.node(leader).kill().expect("kill the leader");
    let new_leader = cluster.wait_for_leader(Duration::from_secs(30)).expect("re-election");
    assert_ne!(new_leader, leader);
    // The holder rides out the election: its lease is kept alive through the new leader.
    eventually(Duration::from_secs(10), "holder confirmed again", || async { g.state() == LeaseState::Held })
        .await;
    assert!(rx.try_recv().is_err(), "no waiter may hold while the holder does");
    let mut fences = vec![g.fence()];
    inside.fetch_sub(1, Ordering::SeqCst);
    g.release().await.expect("release after the failover");
    for _ in 0..2 {
        let g = within(Duration::from_secs(20), "next waiter", rx.recv()).await.expect("channel");
        fences.push(g.fence());
        inside.fetch_sub(1, Ordering::SeqCst);
        g.release().await.expect("release");
    }
    assert!(fences.windows(2).all(|w| w[0] < w[1]), "fences increase across the failover: {fences:?}");
    for w in waiters {
        w.await.expect("waiter task");
    }
    cluster.node(leader).restart().expect("restart the old leader");
    let g = locker(&holder).lock(&k).wait(Duration::from_secs(10)).acquire().await.expect("works again");
    assert!(g.fence() > *fences.last().expect("fences"), "fence after the restart");
    g.release().await.expect("release");
    // The observer's client may still be reconnecting after the restart (a failed read counts
    // as usize::MAX, which once failed this case): ask until it answers, and the answer is 0,
    // within 3 s (well under the 10 s lease a leftover key of a dead session would live).
    eventually(Duration::from_secs(3), "no key left behind", || {
        let c = observer.clone();
        let prefix = prefix.clone();
        async move { queued(&c, &prefix).await == 0 }
    })
    .await;
}

/// An acquisition dropped while it waits leaves no key in the queue: the next in line is
/// served at once after the holder's release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_acquire_mid_wait_leaves_no_key() {
    let endpoints = shared();
    let k = key("dropped");
    let (a, b, c) = (
        etcd_lock(&endpoints, TTL).await,
        etcd_lock(&endpoints, TTL).await,
        etcd_lock(&endpoints, TTL).await,
    );
    let prefix = a.lock_prefix(&k);
    let observer = a.client();
    let g = locker(&a).try_lock(&k).await.expect("try").expect("free");
    let lb = locker(&b);
    let waiting = lb.lock(&k).wait(Duration::from_secs(30)).acquire();
    let cut = timeout(Duration::from_millis(300), waiting).await;
    assert!(cut.is_err(), "the waiter cannot have acquired a held key");
    eventually(Duration::from_secs(2), "the dropped waiter's key is gone", || {
        let c = observer.clone();
        let prefix = prefix.clone();
        async move { queued(&c, &prefix).await == 1 }
    })
    .await;
    g.release().await.expect("release");
    assert_eq!(queued(&observer, &prefix).await, 0, "nothing queued after the release");
    let t = Instant::now();
    let g = locker(&c).try_lock(&k).await.expect("try").expect("free at once");
    assert!(t.elapsed() < Duration::from_secs(1));
    g.release().await.expect("release");
}

/// Least privilege: a user whose role has `readwrite` on `<prefix>/` only takes locks there; a
/// lock space outside its prefix is refused with `PermissionDenied`, and a wrong password too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn role_with_readwrite_on_the_prefix_is_enough() {
    let Some(srv) = server::or_skip("etcd", EtcdServer::start()) else { return };
    for cmd in [
        &["user", "add", "root:root-pw"][..],
        &["role", "add", "dlock"],
        &["role", "grant-permission", "dlock", "--prefix=true", "readwrite", "/app/"],
        &["user", "add", "app:app-pw"],
        &["user", "grant-role", "app", "dlock"],
        &["auth", "enable"],
    ] {
        srv.etcdctl(cmd).unwrap_or_else(|e| panic!("etcdctl {cmd:?}: {e}"));
    }
    let url = |auth: &str, prefix: &str| format!("etcd://{auth}@{}/{prefix}?lease_ttl=1s", srv.endpoint());
    let app = EtcdLock::from_url(&url("app:app-pw", "app")).await.expect("app connects");
    let l = locker(&app);
    let g = l.lock("job").wait(Duration::from_secs(5)).acquire().await.expect("lock under the prefix");
    let dbg = format!("{app:?}");
    assert!(!dbg.contains("app-pw"), "{dbg}");
    g.release().await.expect("release");
    let outside = EtcdLock::from_url(&url("app:app-pw", "other")).await.expect("connects");
    match locker(&outside).try_lock("job").await {
        Err(LockError::PermissionDenied { .. }) => {}
        other => panic!("outside the prefix: {other:?}"),
    }
    match EtcdLock::from_url(&url("app:wrong", "app")).await {
        Err(LockError::PermissionDenied { .. }) => {}
        other => panic!("wrong password: {other:?}"),
    }
}

/// A lock built on the caller's own `etcd_client::Client` excludes a lock built from a URL on
/// the same prefix, and hands over to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_client_shares_the_lock_space() {
    let endpoints = shared();
    let own = etcd::Client::connect(&endpoints, None).await.expect("user client");
    let mine = EtcdLock::builder().client(own).prefix("/faults").lease_ttl(TTL).build().await.expect("build");
    let url = EtcdLock::from_url(&format!("etcd://{}/faults?lease_ttl=1s", endpoints[0])).await.expect("url");
    assert_eq!(mine.identity(), url.identity(), "one lock space");
    let k = key("user");
    let g = locker(&mine).try_lock(&k).await.expect("try").expect("free");
    assert!(locker(&url).try_lock(&k).await.expect("try").is_none(), "exclusive");
    let waiter = locker(&url);
    let (k2, fence) = (k.clone(), g.fence());
    let waiting = tokio::spawn(async move { waiter.lock(&k2).wait(Duration::from_secs(10)).acquire().await });
    g.release().await.expect("release");
    let g2 = within(Duration::from_secs(5), "hand-over", waiting).await.expect("task").expect("acquire");
    assert!(g2.fence() > fence);
    g2.release().await.expect("release");
}

/// The holder is cut off from the server (its connection blackholed) while a waiter on its own
/// connection waits: the holder is told it lost the lock before the server lets the waiter in,
/// and once the holder's network is back its old lease does not keep the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitioned_holder_is_told_before_a_waiter_is_granted() {
    let endpoints = shared();
    let proxy = lock_testkit::proxy::Proxy::start(endpoints[0].parse().expect("addr")).await.expect("proxy");
    let holder = etcd_lock(&[proxy.addr().to_string()], TTL).await;
    let k = key("partition");
    let g = locker(&holder).try_lock(&k).await.expect("try").expect("free");
    let fired = tokio::spawn({
        let lost = g.lost();
        async move {
            lost.await;
            Instant::now()
        }
    });
    let waiter = locker(&etcd_lock(&endpoints, TTL).await);
    let k2 = k.clone();
    let waiting = tokio::spawn(async move {
        let g = waiter.lock(&k2).wait(Duration::from_secs(20)).acquire().await.expect("waiter acquires");
        (Instant::now(), g)
    });
    proxy.blackhole(true);
    let (granted_at, g2) = within(Duration::from_secs(20), "waiter granted", waiting).await.expect("task");
    let lost_at = within(Duration::from_secs(1), "holder told", fired).await.expect("task");
    assert!(
        lost_at < granted_at,
        "the holder was told {:?} after the waiter was granted",
        lost_at - granted_at
    );
    println!("partition: holder told {:?} before the waiter was granted", granted_at - lost_at);
    assert_eq!(g.state(), LeaseState::Lost(LostReason::DeadlinePassed));
    assert!(g2.fence() > g.fence());
    proxy.blackhole(false);
    g2.release().await.expect("release");
    // The old client, reachable again, neither holds the key nor blocks it.
    let third = locker(&etcd_lock(&endpoints, TTL).await);
    let g3 = third.lock(&k).wait(Duration::from_secs(5)).acquire().await.expect("free again");
    g3.release().await.expect("release");
    let g4 =
        locker(&holder).lock(&k).wait(Duration::from_secs(10)).acquire().await.expect("old client again");
    g4.release().await.expect("release");
}
