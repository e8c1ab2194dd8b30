//! ZooKeeper-specific behaviour and faults: no herd effect and FIFO order, a paused server, a
//! leader killed in a 3-node ensemble, a holder process killed, ACLs, a reaped lock directory.
//!
//! Tests that stop or kill a server start their own; the others share this binary's server.
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use lock_core::{LeaseState, LockBackend, LockError, LockGuard, Locker, LostReason};
use lock_testkit::server::{self, ZkEnsemble, ZkServer};
use lock_zk::{ZkLock, zookeeper_client as zk};
use tokio::time::{Instant, timeout};

const SESSION: Duration = Duration::from_millis(1000);

fn run_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..8].to_owned()
}

async fn zk_lock(connect: &str, session: Duration) -> ZkLock {
    ZkLock::builder()
        .connect_string(connect)
        .root("/faults")
        .session_timeout(session)
        .build()
        .await
        .expect("connect to zookeeper")
}

fn locker(z: &ZkLock) -> Locker {
    Locker::new(Arc::new(z.clone()) as Arc<dyn LockBackend>)
}

/// Poll `cond` until it holds, failing after `limit`.
async fn eventually(limit: Duration, what: &str, mut cond: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !cond().await {
        assert!(Instant::now() < deadline, "{what}: not true within {limit:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn children(client: &zk::Client, dir: &str) -> usize {
    client.list_children(dir).await.map(|c| c.len()).unwrap_or(0)
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
        eventually(Duration::from_secs(5), "waiter queued", async || {
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
    eventually(Duration::from_secs(5), "waiter queued", async || children(&wc, &dir).await == 2).await;

    let killed = Instant::now();
    ens.node(leader).kill().expect("kill leader");
    let new_leader = ens.wait_for_quorum(Duration::from_secs(20)).expect("new quorum");
    println!("leader {leader} killed; node {new_leader} leads after {:?}", killed.elapsed());

    // Reconnected within the session: the lock is confirmed held again, never lost.
    eventually(session * 3, "holder confirmed after reconnect", async || {
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
    eventually(Duration::from_secs(5), "waiter queued", async || children(&wc, &dir).await == 2).await;

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
