//! The queue and its directory: no herd and FIFO order, ACLs, a reaped lock directory, a missing
//! chroot.

use super::*;

/// 20 waiters queue behind a holder; every release wakes exactly one waiter (counted on the
/// clients' predecessor watches), and they are served in arrival order (fair FIFO).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_waiters_no_herd_fifo() {
    const WAITERS: usize = 20;
    let connect = lock_zk_testing::shared_zk().connect_string();
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
    if let Ok(wchs) = lock_zk_testing::shared_zk().four_letter("wchs") {
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

/// With digest auth, lock directories carry creator-only ACLs: an unauthenticated client (or one
/// with the wrong password) can neither delete a holder's node nor queue in the directory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acl_protects_lock_nodes() {
    let connect = lock_zk_testing::shared_zk().connect_string();
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
    let connect = lock_zk_testing::shared_zk().connect_string();
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
    let connect = lock_zk_testing::shared_zk().connect_string();
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
