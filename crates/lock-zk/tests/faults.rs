//! ZooKeeper-specific behaviour and faults: no herd effect and FIFO order, a paused server, a
//! partitioned holder, a killed session under nested guards, cut-off acquisitions, late
//! cleanups, a leader killed in a 3-node ensemble, a holder process killed, ACLs, a reaped lock
//! directory.
//!
//! Tests that stop or kill a server start their own; the others share this binary's server.
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use lock_core::{LeaseState, LockBackend, LockError, LockGuard, LostReason, OwnerToken};
use lock_testkit::proxy::Proxy;
use lock_testkit::server::{self, ZkEnsemble, ZkServer};
use lock_testkit::{cut_after, eventually};
use lock_zk::{ZkLock, zookeeper_client as zk};
use tokio::time::{Instant, timeout};

mod common;

use common::{children, close_session, locker, run_id};

const SESSION: Duration = Duration::from_millis(1000);

async fn zk_lock(connect: &str, session: Duration) -> ZkLock {
    common::zk_lock(connect, "/faults", session).await
}

/// 20 waiters queue behind a holder; every release wakes exactly one waiter (counted on the
/// clients' predecessor watches), and they are served in arrival order (fair FIFO).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_waiters_no_herd_fifo() {
    const WAITERS: usize = 20;
    let connect = server::shared_zk().connect_string();
    let key = format!("herd-{}", run_id());
    let holder = zk_lock(&connect, SESSION).await;
    let dir = holder.lock_dir(&key);
    let g = locker(&holder).try_lock(&key).await.expect("try").expect("free");
    let observer = holder.client();

    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(usize, LockGuard)>();
    let mut clients = Vec::new();
    for i in 0..WAITERS {
        let z = zk_lock(&connect, SESSION).await;
        clients.push(z.clone());
        let (l, k, tx) = (locker(&z), key.clone(), tx.clone());
        tokio::spawn(async move {
            let g = l.lock(&k).wait(Duration::from_secs(60)).acquire().await.expect("waiter acquires");
            tx.send((i, g)).expect("test alive");
        });
        // Queue strictly one after another, so arrival order is known.
        eventually(Duration::from_secs(5), "waiter queued", || async {
            children(&observer, &dir).await == i + 2
        })
        .await;
    }
    let wakeups = || clients.iter().map(ZkLock::watch_wakeups).sum::<u64>();
    assert_eq!(wakeups(), 0, "no waiter may wake before the first release");
    if let Ok(wchs) = server::shared_zk().four_letter("wchs") {
        println!("server watches with {WAITERS} queued waiters: {}", wchs.trim().replace('\n', "; "));
    }

    g.release().await.expect("release");
    let mut order = Vec::new();
    for step in 0..WAITERS {
        let (i, g) =
            timeout(Duration::from_secs(10), rx.recv()).await.expect("next waiter").expect("channel");
        order.push(i);
        assert_eq!(wakeups(), step as u64 + 1, "release {step} woke more than one waiter");
        assert_eq!(children(&observer, &dir).await, WAITERS - step, "queue length after handoff {step}");
        g.release().await.expect("release");
    }
    assert_eq!(order, (0..WAITERS).collect::<Vec<_>>(), "waiters were not served in arrival order");
    assert_eq!(wakeups(), WAITERS as u64, "each release must wake exactly one waiter");
    println!("herd: {WAITERS} releases caused {} predecessor-watch wakeups", wakeups());
}

/// The holder's server is frozen (SIGSTOP) past the session timeout: the holder learns the lock
/// is uncertain, then lost within a session timeout of its last confirmed request (counted from
/// when that request was sent, less the drift margin); after the server resumes, another client
/// gets the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_server_past_session_timeout_fires_lost() {
    let zks = ZkServer::start().expect("own zookeeper");
    let connect = zks.connect_string();
    let key = format!("pause-{}", run_id());
    let holder = zk_lock(&connect, SESSION).await;
    let timeout_negotiated = holder.session_timeout();
    assert_eq!(
        holder.identity(),
        format!("zk://{connect}/faults"),
        "identity: hosts, chroot, root; no credentials"
    );
    let l = locker(&holder);
    let g = l.try_lock(&key).await.expect("try").expect("free");
    // A nested hold taken through another Locker over the same client has its own signal.
    let elsewhere =
        locker(&holder).lock(&key).owner(g.owner()).try_acquire().await.expect("try").expect("nested");
    let mut states = g.state_changes();

    zks.pause().expect("SIGSTOP");
    let paused = Instant::now();
    timeout(Duration::from_secs(5), states.wait_for(|s| *s == LeaseState::Uncertain))
        .await
        .expect("uncertain while disconnected")
        .expect("signal alive");
    let uncertain_after = paused.elapsed();
    timeout(Duration::from_secs(10), g.lost()).await.expect("lost signal after the session timeout");
    let lost_after = paused.elapsed();
    timeout(Duration::from_millis(100), elsewhere.lost()).await.expect("the nested guard is told too");
    println!(
        "paused server: uncertain after {uncertain_after:?}, lost after {lost_after:?} \
         (session timeout {timeout_negotiated:?})"
    );
    // Given up a drift margin before a session timeout from the last confirmed send (which was
    // before the pause): before the server could expire the session and let anyone else in.
    assert_eq!(g.state(), LeaseState::Lost(LostReason::DeadlinePassed));
    assert!(
        lost_after < timeout_negotiated,
        "told {lost_after:?} after the pause, session timeout {timeout_negotiated:?}"
    );

    zks.resume().expect("SIGCONT");
    let other = locker(&zk_lock(&connect, SESSION).await);
    let g2 = other
        .lock(&key)
        .wait(Duration::from_secs(10))
        .acquire()
        .await
        .expect("another client acquires once the old session expired");
    assert!(matches!(g.release().await, Err(lock_core::LockError::LeaseLost { .. })));
    // The old client opens a new session and keeps working.
    assert!(l.try_lock(&key).await.expect("old client reconnects").is_none(), "still exclusive");
    g2.release().await.expect("release");
    let g3 = l.lock(&key).wait(Duration::from_secs(5)).acquire().await.expect("old client, new session");
    g3.release().await.expect("release");
}

/// A 3-node ensemble: the leader is killed while the lock is held. The holder reconnects within
/// its session and still holds the lock; a waiter connected to another server still queues and
/// gets the lock after the release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ensemble_leader_killed_lock_survives() {
    let ens = ZkEnsemble::start().expect("3-node ensemble");
    let leader = ens.wait_for_quorum(Duration::from_secs(30)).expect("quorum");
    let follower = (0..ens.len()).find(|&i| i != leader).expect("a follower");
    let session = Duration::from_secs(4);
    let key = format!("ensemble-{}", run_id());

    let holder = zk_lock(&ens.connect_string(), session).await;
    let hl = locker(&holder);
    let g = hl.try_lock(&key).await.expect("try").expect("free");
    let fence = g.fence();
    let dir = holder.lock_dir(&key);
    // The waiter knows only one server, and not the leader.
    let waiter = zk_lock(&ens.node(follower).connect_string(), session).await;
    let wl = locker(&waiter);
    let k2 = key.clone();
    let waiting = tokio::spawn(async move { wl.lock(&k2).wait(Duration::from_secs(30)).acquire().await });
    let wc = waiter.client();
    eventually(Duration::from_secs(5), "waiter queued", || async { children(&wc, &dir).await == 2 }).await;

    let killed = Instant::now();
    ens.node(leader).kill().expect("kill leader");
    let new_leader = ens.wait_for_quorum(Duration::from_secs(20)).expect("new quorum");
    println!("leader {leader} killed; node {new_leader} leads after {:?}", killed.elapsed());

    // Reconnected within the session: the lock is confirmed held again, never lost.
    eventually(session * 3, "holder confirmed after reconnect", || async {
        g.renew(session).await.is_ok() && g.state() == LeaseState::Held
    })
    .await;
    assert!(!g.is_lost(), "a reconnect within the session must keep the lock");
    assert_eq!(g.fence(), fence);
    assert!(!waiting.is_finished(), "waiter acquired while the holder still holds");
    let other = locker(&zk_lock(&ens.node(new_leader).connect_string(), session).await);
    assert!(other.try_lock(&key).await.expect("try").is_none(), "lock must still be held");

    let released = Instant::now();
    g.release().await.expect("release after failover");
    let g2 = timeout(Duration::from_secs(10), waiting)
        .await
        .expect("waiter wakes")
        .expect("task")
        .expect("waiter on another server acquires");
    println!("handoff to the waiter on another server after failover: {:?}", released.elapsed());
    assert!(g2.fence() > fence, "fencing token grows across the failover");
    g2.release().await.expect("release");
}

/// Child-process half of [`killed_holder_is_replaced_within_session_timeout`]: acquire, report,
/// then hang until killed. A no-op unless the parent set `LOCK_ZK_CRASH_CHILD`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_child_helper() {
    let Ok(spec) = std::env::var("LOCK_ZK_CRASH_CHILD") else { return };
    let (connect, key) = spec.split_once('|').expect("connect|key");
    let z = zk_lock(connect, SESSION).await;
    let g = locker(&z).try_lock(key).await.expect("try").expect("child gets the free lock");
    println!("ACQUIRED fence={}", g.fence().expect("zk fences"));
    std::future::pending::<()>().await;
}

/// Never leave the holder process behind, even when an assertion fails first.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The holder's process is SIGKILLed (no release, no session close): a waiter acquires within
/// the session timeout (plus a tick of expiry rounding).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_holder_is_replaced_within_session_timeout() {
    let connect = server::shared_zk().connect_string();
    let key = format!("crash-{}", run_id());
    let mut child = KillOnDrop(
        Command::new(std::env::current_exe().expect("test binary"))
            .args(["--exact", "crash_child_helper", "--nocapture", "--test-threads=1"])
            .env("LOCK_ZK_CRASH_CHILD", format!("{connect}|{key}"))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn holder process"),
    );
    let stdout = child.0.stdout.take().expect("stdout");
    let line = tokio::task::spawn_blocking(move || {
        let mut lines = BufReader::new(stdout).lines();
        // libtest prints `test crash_child_helper ... ` before the child's own output on one line.
        lines.find_map(|l| l.ok()?.split_once("ACQUIRED fence=").map(|(_, f)| f.trim().to_owned()))
    })
    .await
    .expect("reader");
    let child_fence: u64 =
        line.and_then(|f| f.parse().ok()).expect("child reports its acquisition and fence");

    let waiter = zk_lock(&connect, SESSION).await;
    let session = waiter.session_timeout();
    let wl = locker(&waiter);
    assert!(wl.try_lock(&key).await.expect("try").is_none(), "child holds the lock");
    let k2 = key.clone();
    let waiting = tokio::spawn(async move {
        let g = wl.lock(&k2).wait(Duration::from_secs(20)).acquire().await;
        (Instant::now(), g)
    });
    let wc = waiter.client();
    let dir = waiter.lock_dir(&key);
    eventually(Duration::from_secs(5), "waiter queued", || async { children(&wc, &dir).await == 2 }).await;

    child.0.kill().expect("SIGKILL the holder");
    let killed = Instant::now();
    let _ = child.0.wait();
    let (got, g) = timeout(Duration::from_secs(20), waiting).await.expect("waiter").expect("task");
    let g = g.expect("waiter acquires after the holder's session expired");
    let took = got - killed;
    println!("holder SIGKILLed: waiter acquired after {took:?} (session timeout {session:?})");
    assert!(g.fence().expect("zk fences").0 > child_fence, "fencing token grows after the crash");
    assert!(took <= session + Duration::from_millis(300), "took {took:?}, session timeout {session:?}");
    g.release().await.expect("release");
}

/// With digest auth, lock directories carry creator-only ACLs: an unauthenticated client (or one
/// with the wrong password) can neither delete a holder's node nor queue in the directory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acl_protects_lock_nodes() {
    let connect = server::shared_zk().connect_string();
    let key = format!("acl-{}", run_id());
    let secured = |user: &'static str, pw: &'static str| {
        let connect = connect.clone();
        async move {
            ZkLock::builder()
                .connect_string(format!("{connect}/acl-chroot"))
                .create_chroot(true)
                .root("/locks")
                .session_timeout(SESSION)
                .auth(user, pw)
                .build()
                .await
        }
    };
    let a = secured("alice", "right").await.expect("alice connects");
    let ga = locker(&a).try_lock(&key).await.expect("try").expect("free");
    let dir = a.lock_dir(&key);
    let node = a.client().list_children(&dir).await.expect("list")[0].clone();
    let path = format!("{dir}/{node}");

    for (who, client) in [
        ("unauthenticated", zk::Client::connect(&format!("{connect}/acl-chroot")).await.expect("connect")),
        (
            "wrong password",
            zk::Client::connector()
                .with_auth("digest", b"alice:wrong")
                .connect(&format!("{connect}/acl-chroot"))
                .await
                .expect("connect"),
        ),
    ] {
        assert_eq!(client.delete(&path, None).await, Err(zk::Error::NoAuth), "{who} deleted the node");
        let intruder = format!("{dir}/x");
        let create =
            client.create(&intruder, &[], &zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all()));
        assert_eq!(create.await.err(), Some(zk::Error::NoAuth), "{who} created in the lock directory");
        assert!(client.list_children(&dir).await.is_ok(), "{who} may still read (world:anyone:r)");
    }
    // A client with the wrong password cannot take part at all; the right user still contends.
    let mallory = secured("alice", "wrong").await.expect("connects (digest auth is checked per ACL)");
    match locker(&mallory).try_lock(&key).await {
        Err(e) => assert!(!e.is_temporary(), "NoAuth is permanent: {e:?}"),
        Ok(g) => panic!("wrong credentials must be refused, got {g:?}"),
    }
    let a2 = secured("alice", "right").await.expect("second session of alice");
    assert!(locker(&a2).try_lock(&key).await.expect("try").is_none(), "lock still held");
    assert!(!ga.is_lost());
    ga.release().await.expect("release");
    locker(&a2).try_lock(&key).await.expect("try").expect("free").release().await.expect("release");
}

/// A lock directory removed between acquisitions (as the server reaps empty containers) is
/// created again by the next acquisition.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reaped_lock_directory_is_recreated() {
    let connect = server::shared_zk().connect_string();
    let key = format!("reap-{}", run_id());
    let z = zk_lock(&connect, SESSION).await;
    let l = locker(&z);
    let g = l.try_lock(&key).await.expect("try").expect("free");
    let f1 = g.fence();
    g.release().await.expect("release");
    let dir = z.lock_dir(&key);
    z.client().delete(&dir, None).await.expect("remove the empty lock directory");
    let g = l.try_lock(&key).await.expect("try").expect("acquired under a re-created directory");
    assert!(g.fence() > f1, "czxid fencing grows even though the sequence counter restarted");
    g.release().await.expect("release");
}

/// A chroot that does not exist is refused with a clear error (usually a typo that would split
/// the lock space), unless creating it is asked for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_chroot_is_refused_unless_asked_for() {
    let connect = server::shared_zk().connect_string();
    let chroot = format!("/typo-{}", run_id());
    let err = ZkLock::builder()
        .connect_string(format!("{connect}{chroot}"))
        .session_timeout(SESSION)
        .build()
        .await
        .expect_err("a missing chroot must be refused");
    assert!(matches!(err, LockError::InvalidConfig { .. }), "{err:?}");
    assert!(err.to_string().contains(&chroot) && err.to_string().contains("create_chroot"), "{err}");
    let url = format!("zk://{connect}/locks?chroot={chroot}&create_chroot=true&session_timeout_ms=1000");
    let z = ZkLock::builder().url(&url).build().await.expect("created when asked for");
    locker(&z).try_lock("k").await.expect("try").expect("free").release().await.expect("release");
}

/// A random duration below `max` (phases and offsets only; never a synchronisation).
fn random_below(max: Duration) -> Duration {
    let nanos = max.as_nanos().max(1);
    Duration::from_nanos((uuid::Uuid::new_v4().as_u128() % nanos) as u64)
}

/// The holder's connection is partitioned (a proxy holds every byte back): the server stops
/// hearing from it and expires its session a session timeout after the last request it got,
/// then grants the lock to a waiter on another connection. The holder must be told first: a
/// drift margin before a session timeout from its last confirmed *send* (here a renewal made
/// just before the cut, at a random phase of the client's own timers).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitioned_holder_is_told_before_a_waiter_is_granted() {
    const ROUNDS: usize = 4;
    let zks = server::shared_zk();
    let proxy =
        Proxy::start(format!("127.0.0.1:{}", zks.port()).parse().expect("addr")).await.expect("proxy");
    let key = format!("partition-{}", run_id());
    let waiter = zk_lock(&zks.connect_string(), SESSION).await;
    let (wc, dir) = (waiter.client(), waiter.lock_dir(&key));
    for round in 0..ROUNDS {
        // A wide drift margin: a busy 2-core test machine can delay a timer by more than the
        // default 15 ms, and this test is about where the deadline is counted from.
        let holder = ZkLock::builder()
            .connect_string(format!("127.0.0.1:{}", proxy.port()))
            .root("/faults")
            .session_timeout(SESSION)
            .clock_drift(0.0, Duration::from_millis(50))
            .build()
            .await
            .expect("connect through the proxy");
        let session = holder.session_timeout();
        let g = locker(&holder).try_lock(&key).await.expect("try").expect("free");
        let nested = locker(&holder).lock(&key).owner(g.owner()).try_acquire().await.expect("try");
        let nested = nested.expect("nested through another Locker");
        let (wl, k) = (locker(&waiter), key.clone());
        let waiting = tokio::spawn(async move {
            let g = wl.lock(&k).wait(Duration::from_secs(20)).acquire().await;
            (Instant::now(), g)
        });
        eventually(Duration::from_secs(5), "waiter queued", || async { children(&wc, &dir).await == 2 })
            .await;
        let fired = tokio::spawn({
            let lost = g.lost();
            async move {
                lost.await;
                Instant::now()
            }
        });
        tokio::time::sleep(random_below(session / 3)).await;
        let sent = Instant::now();
        g.renew(session).await.expect("renew confirms the session");
        proxy.blackhole(true);
        let lost_at = timeout(Duration::from_secs(5), fired).await.expect("holder told").expect("task");
        let (granted_at, g2) =
            timeout(Duration::from_secs(20), waiting).await.expect("waiter").expect("task");
        let g2 = g2.expect("the waiter gets the lock once the holder's session expired");
        proxy.blackhole(false);
        timeout(Duration::from_secs(1), nested.lost()).await.expect("the nested guard is told too");
        let told = lost_at - sent;
        println!(
            "partition round {round}: holder told {told:?} after its last confirmed send, {:?} before \
             the waiter was granted (session timeout {session:?})",
            granted_at.saturating_duration_since(lost_at)
        );
        assert_eq!(g.state(), LeaseState::Lost(LostReason::DeadlinePassed));
        assert!(lost_at < granted_at, "round {round}: the waiter was granted before the holder was told");
        // The server cannot expire the session earlier than a session timeout after it got
        // the renewal, which was sent at `sent`.
        assert!(told < session, "round {round}: told {told:?} after the last confirmed send");
        assert!(matches!(g.release().await, Err(LockError::LeaseLost { .. })));
        g2.release().await.expect("release");
    }
}

/// The session under a hold is closed behind the holder's back (an operator takes the session
/// over from another connection, while the holder's own connection is held up so it cannot take
/// it back, and closes it): every guard of the hold is told, the outer one, a nested one through
/// the same `Locker` (which shares its signal), one through another `Locker` over the same client
/// (its own signal) and one with a fixed lease; the hold leaves the client's table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_session_reaches_every_nested_guard() {
    let connect = server::shared_zk().connect_string();
    let port = server::shared_zk().port();
    let proxy = Proxy::start(format!("127.0.0.1:{port}").parse().expect("addr")).await.expect("proxy");
    let key = format!("killnest-{}", run_id());
    let z = zk_lock(&format!("127.0.0.1:{}", proxy.port()), SESSION).await;
    let (l1, l2) = (locker(&z), locker(&z));
    let outer = l1.try_lock(&key).await.expect("try").expect("free");
    let owner = outer.owner();
    let same = l1.lock(&key).owner(owner).try_acquire().await.expect("try").expect("nested, same Locker");
    let other = l2.lock(&key).owner(owner).try_acquire().await.expect("try").expect("nested, other Locker");
    let fixed = l2.lock(&key).owner(owner).lease(Duration::from_secs(60)).try_acquire().await;
    let fixed = fixed.expect("try").expect("nested with a fixed lease");
    assert_eq!(z.held_count(), 1, "one hold, counted four times");

    proxy.blackhole(true);
    close_session(&connect, z.client().session(), SESSION).await;
    let observer = zk::Client::connect(&connect).await.expect("observer");
    let dir = z.lock_dir(&key);
    eventually(Duration::from_secs(5), "session closed", || async { children(&observer, &dir).await == 0 })
        .await;
    proxy.blackhole(false);
    let mut reasons = Vec::new();
    for (name, g) in [("outer", &outer), ("same", &same), ("other", &other), ("fixed", &fixed)] {
        timeout(Duration::from_secs(5), g.lost()).await.unwrap_or_else(|_| panic!("{name} guard told"));
        reasons.push(g.state());
    }
    // Told as the expiry reaches the client, or at the local deadline if that comes first.
    assert!(reasons.iter().all(|r| *r == reasons[0]), "one loss, one reason: {reasons:?}");
    println!("killed session: every guard told, {:?}", reasons[0]);
    assert_eq!(z.held_count(), 0, "a lost hold leaves the table (no release follows)");
    let rival = locker(&zk_lock(&connect, SESSION).await);
    let g = rival.try_lock(&key).await.expect("try").expect("free once the session is closed");
    for g in [fixed, other, same, outer] {
        assert!(matches!(g.release().await, Err(LockError::LeaseLost { .. })));
    }
    assert!(rival.try_lock(&key).await.expect("try").is_none(), "stale releases freed nothing");
    g.release().await.expect("release");
    // The client opens a new session and works on.
    let again = l1.lock(&key).wait(Duration::from_secs(5)).acquire().await.expect("new session");
    again.release().await.expect("release");
}

/// 1000 acquisitions of a free key cut off at sub-millisecond offsets spread over 0..2x the
/// median acquire time (busy-waited, so any await point can be hit), alternately try-once and
/// waiting: after each, a second client gets the key, and the client itself sees no node left,
/// within the bound below.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cut_off_acquisitions_leave_the_key_free() {
    const ROUNDS: u32 = 1000;
    // The cleanup is one or two round trips. What is checked is that a cut-off attempt never
    // leaves the key held; the bound only turns "never freed" into a failure. It is wide
    // because on a loaded 2-core machine (the suite beside a JVM server) rounds were seen to
    // take over a second, uncut ones included; the printed p50/p99 show the real figures.
    const CLEANUP_BOUND: Duration = Duration::from_secs(3);
    let connect = server::shared_zk().connect_string();
    let za = zk_lock(&connect, SESSION).await;
    let (a, c) = (locker(&za), locker(&zk_lock(&connect, SESSION).await));
    let key = format!("cut-{}", run_id());
    let (own, dir) = (za.client(), za.lock_dir(&key));
    let mut samples = Vec::new();
    for _ in 0..41 {
        let t = std::time::Instant::now();
        let g = a.try_lock(&key).await.expect("try").expect("free");
        samples.push(t.elapsed());
        g.release().await.expect("release");
    }
    samples.sort();
    let median = samples[samples.len() / 2];
    let (mut cut, mut frees, mut empties) = (0, Vec::new(), Vec::new());
    for i in 0..ROUNDS {
        let offset = median * (i % 40) / 20 + random_below(median / 20);
        let out = if i % 2 == 0 {
            cut_after(a.try_lock(&key), offset).await
        } else {
            cut_after(a.lock(&key).wait(Duration::from_secs(5)).acquire(), offset).await.map(|r| r.map(Some))
        };
        match out {
            Some(r) => r.expect("attempt").expect("free key").release().await.expect("release"),
            None => cut += 1,
        }
        let t = std::time::Instant::now();
        loop {
            if let Some(g) = c.try_lock(&key).await.expect("try") {
                g.release().await.expect("release");
                break;
            }
            assert!(t.elapsed() < CLEANUP_BOUND, "a cut-off attempt (offset {offset:?}) left the key held");
            tokio::task::yield_now().await;
        }
        frees.push(t.elapsed());
        // Another session can be served before a create this session had already sent: empty
        // as seen by this session itself (requests of one session are applied in order) means
        // no node of a cut-off attempt is left or still to come.
        loop {
            if children(&own, &dir).await == 0 {
                break;
            }
            assert!(t.elapsed() < CLEANUP_BOUND, "a cut-off attempt (offset {offset:?}) left its node");
            tokio::task::yield_now().await;
        }
        empties.push(t.elapsed());
    }
    let pct = |v: &mut Vec<Duration>| {
        v.sort();
        format!("p50 {:?}, p99 {:?}, max {:?}", v[v.len() / 2], v[v.len() * 99 / 100], v[v.len() - 1])
    };
    println!(
        "cut-off: {cut} of {ROUNDS} attempts cut (median acquire {median:?}); key free for another \
         client within {}; no node left within {}",
        pct(&mut frees),
        pct(&mut empties)
    );
    // Offsets span twice the median acquire time measured before; under load the spread moves,
    // and a tenth cut is still a hundred cancellations at every stage of an attempt.
    assert!(cut >= ROUNDS / 10, "too few attempts were cut off ({cut}) to mean anything");
}

/// A cleanup only removes its own attempt's node, never a later grant to the same owner token:
/// an attempt cut off while the server is frozen (its create, and later its cleanup, delivered
/// after the resume) is followed at once by a second attempt of the same owner, which must keep
/// the lock; and a guard whose node was deleted behind its back, released after the same owner
/// took the key again, frees nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_cleanup_never_frees_a_later_grant_of_the_same_owner() {
    const ROUNDS: usize = 20;
    let zks = ZkServer::start().expect("own zookeeper");
    let connect = zks.connect_string();
    let z = zk_lock(&connect, SESSION).await;
    let (a, b) = (locker(&z), locker(&zk_lock(&connect, SESSION).await));
    let observer = z.client();
    for round in 0..ROUNDS {
        let key = format!("late-{}", run_id());
        let dir = z.lock_dir(&key);
        let owner = OwnerToken::random();
        zks.pause().expect("SIGSTOP");
        // The create is sent into the frozen server; the attempt is dropped before any answer.
        let cut =
            cut_after(a.lock(&key).owner(owner).try_acquire(), random_below(Duration::from_millis(2))).await;
        assert!(cut.is_none(), "no answer can come from a frozen server");
        zks.resume().expect("SIGCONT");
        let g =
            a.lock(&key).owner(owner).wait(Duration::from_secs(5)).acquire().await.expect("same owner again");
        // Wait for the cut-off attempt's node to be gone (it was created, then cleaned up).
        eventually(Duration::from_secs(5), "cut-off attempt cleaned up", || async {
            children(&observer, &dir).await == 1
        })
        .await;
        assert!(b.try_lock(&key).await.expect("try").is_none(), "round {round}: the later grant was freed");
        assert_eq!(g.state(), LeaseState::Held);
        g.renew(SESSION).await.expect("still ours");
        g.release().await.expect("release");
    }

    // A stale guard: its node deleted by an operator, the same owner takes the key again.
    let key = format!("lateguard-{}", run_id());
    let owner = OwnerToken::random();
    let g1 = a.lock(&key).owner(owner).try_acquire().await.expect("try").expect("free");
    let dir = z.lock_dir(&key);
    for c in observer.list_children(&dir).await.expect("list") {
        observer.delete(&format!("{dir}/{c}"), None).await.expect("operator deletes the node");
    }
    timeout(Duration::from_secs(5), g1.lost()).await.expect("told of the deletion");
    assert_eq!(g1.state(), LeaseState::Lost(LostReason::NotOwner));
    assert_eq!(z.held_count(), 0, "the lost hold left the table");
    let g2 = a.lock(&key).owner(owner).try_acquire().await.expect("try").expect("same owner again");
    assert!(matches!(g1.release().await, Err(LockError::LeaseLost { .. })));
    assert!(b.try_lock(&key).await.expect("try").is_none(), "the stale release freed the new hold");
    assert_eq!(g2.state(), LeaseState::Held);
    g2.release().await.expect("release");
}
