//! A lock built on the caller's own `zookeeper_client::Client` (`ZkLockBuilder::client`): it
//! uses that client's session (no second one), inside its chroot, excludes locks built from a
//! URL on the same root, reports the session's troubles on its guards, fails every acquisition
//! with a typed error once the session is gone, and leaves the client usable for the caller.

use std::time::Duration;

use lock_core::{LeaseState, LockBackend, LockError, LostReason};
use lock_testkit::proxy::Proxy;
use lock_testkit::{eventually, within};
use lock_zk::{SessionEnded, ZkLock, encode_key, zookeeper_client as zk};

use crate::common;

use common::{close_session, locker, run_id};

/// A persistent node at `path` (test setup through a plain client).
async fn mkdir(client: &zk::Client, path: &str) {
    let acls = [zk::Acl::new(zk::Permission::ALL, zk::AuthId::anyone())];
    let opts = zk::CreateMode::Persistent.with_acls(zk::Acls::new(&acls));
    client.mkdir(path, &opts).await.expect("mkdir");
}

/// The caller's client is chrooted: the lock root is inside the chroot, no second session is
/// opened, and a lock built from a URL with the same chroot and root is the same lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_client_lock_excludes_url_lock_in_its_chroot() {
    let connect = lock_zk_testing::shared_zk().connect_string();
    let id = run_id();
    let plain = zk::Client::connect(&connect).await.expect("plain client");
    let chroot = format!("/uc-{id}");
    mkdir(&plain, &chroot).await;
    let user = zk::Client::connect(&format!("{connect}{chroot}")).await.expect("user's chrooted client");

    let mine =
        ZkLock::builder().client(user.clone()).root("/locks").build().await.expect("lock on user's client");
    assert_eq!(mine.session_id(), user.session_id().0, "the lock rides on the user's session");
    assert_eq!(mine.identity(), format!("zk://user-client/uc-{id}/locks"));
    let url = format!("zk://{connect}/locks?chroot={chroot}");
    let theirs = ZkLock::builder().url(&url).build().await.expect("lock from a url");
    assert_ne!(theirs.session_id(), user.session_id().0);
    let (l_mine, l_theirs) = (locker(&mine), locker(&theirs));

    let key = format!("shared/{id}");
    let g = l_mine.try_lock(&key).await.expect("try").expect("free");
    assert!(l_theirs.try_lock(&key).await.expect("try").is_none(), "the url lock is excluded");
    // The node is inside the chroot, owned by the user's session.
    let dir = format!("{chroot}/locks/{}", encode_key(&key));
    assert_eq!(mine.lock_dir(&key), format!("/locks/{}", encode_key(&key)), "relative to the chroot");
    // The refused try's node is deleted in the background: wait for ours alone.
    eventually(Duration::from_secs(5), "one node in the lock directory inside the chroot", || async {
        plain.list_children(&dir).await.is_ok_and(|c| c.len() == 1)
    })
    .await;
    let nodes = plain.list_children(&dir).await.expect("lock directory");
    let stat = plain.check_stat(&format!("{dir}/{}", nodes[0])).await.expect("stat").expect("node");
    assert_eq!(stat.ephemeral_owner, user.session_id().0);

    // A waiter from the url lock is handed the key on release, and then excludes ours.
    let waiter = tokio::spawn({
        let (l, key) = (l_theirs.clone(), key.clone());
        async move { l.lock(&key).wait(Duration::from_secs(5)).acquire().await }
    });
    eventually(Duration::from_secs(5), "the waiter queued", || async {
        plain.list_children(&dir).await.is_ok_and(|c| c.len() == 2)
    })
    .await;
    g.release().await.expect("release");
    let g2 =
        within(Duration::from_secs(5), "hand-over", waiter).await.expect("join").expect("url lock acquires");
    assert!(l_mine.try_lock(&key).await.expect("try").is_none(), "the user-client lock is excluded");
    g2.release().await.expect("release");
    let g3 = l_mine.try_lock(&key).await.expect("try").expect("free again");
    g3.release().await.expect("release");
}

/// The user's client serves the user's own znodes (data, an ephemeral node, a watch) while the
/// lock holds on it, and dropping the lock leaves its session open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_client_keeps_working_for_the_users_znodes() {
    let connect = lock_zk_testing::shared_zk().connect_string();
    let id = run_id();
    let user = zk::Client::connect(&connect).await.expect("user's client");
    let acls = [zk::Acl::new(zk::Permission::ALL, zk::AuthId::anyone())];
    let own = format!("/users-own-{id}");
    user.create(&own, b"v1", &zk::CreateMode::Persistent.with_acls(zk::Acls::new(&acls)))
        .await
        .expect("user's node");
    let (_, _, watch) = user.get_and_watch_data(&own).await.expect("watch the user's node");

    let z = ZkLock::builder().client(user.clone()).root("/user-client").build().await.expect("lock");
    let l = locker(&z);
    let key = format!("busy-{id}");
    let g = l.lock(&key).wait(Duration::from_secs(2)).acquire().await.expect("acquire");
    // The user's requests and watches go on beside the lock's.
    user.set_data(&own, b"v2", None).await.expect("user writes while the lock is held");
    let event = within(Duration::from_secs(5), "the user's watch fires", watch.changed()).await;
    assert_eq!(event.event_type, zk::EventType::NodeDataChanged);
    let eph = format!("/users-eph-{id}");
    user.create(&eph, b"", &zk::CreateMode::Ephemeral.with_acls(zk::Acls::new(&acls)))
        .await
        .expect("ephemeral");
    assert_eq!(user.get_data(&own).await.expect("read").0, b"v2");
    assert_eq!(g.state(), LeaseState::Held);
    g.release().await.expect("release");

    drop(l);
    drop(z);
    // The session is the user's: still open, their ephemeral node still there.
    assert!(!user.state().is_terminated(), "{:?}", user.state());
    assert!(user.check_stat(&eph).await.expect("stat").is_some(), "the user's ephemeral node lives on");
    let lock_dir = format!("/user-client/{}", encode_key(&key));
    let left = user.list_children(&lock_dir).await.unwrap_or_default();
    assert!(left.is_empty(), "no lock node left: {left:?}");
    user.delete(&eph, None).await.expect("cleanup");
    user.delete(&own, None).await.expect("cleanup");
}

/// The user's client, with a `session` timeout, connected to the shared server through a proxy
/// of its own, and a lock on it under `/user-client`.
async fn proxied_user_lock(session: Duration) -> (Proxy, zk::Client, ZkLock) {
    let port = lock_zk_testing::shared_zk().port();
    let proxy = Proxy::start(format!("127.0.0.1:{port}").parse().expect("addr")).await.expect("proxy");
    let user = zk::Client::connector()
        .with_session_timeout(session)
        .connect(&format!("127.0.0.1:{}", proxy.port()))
        .await
        .expect("user's client");
    let z = ZkLock::builder().client(user.clone()).root("/user-client").build().await.expect("lock");
    (proxy, user, z)
}

/// The user's session is cut off (Uncertain), then closed behind its back as the fault tests
/// do (the session taken over and closed by another connection): the held guard is Lost, every
/// later acquisition fails at once with the typed `SessionEnded` (no hang to the deadline, no
/// second session), and a new lock on the dead client is refused the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_client_session_expiry_loses_guards_and_fails_later_acquires() {
    const SESSION: Duration = Duration::from_millis(2000);
    let connect = lock_zk_testing::shared_zk().connect_string();
    let (proxy, user, z) = proxied_user_lock(SESSION).await;
    let l = locker(&z);
    let key = format!("expire-{}", run_id());
    let g = l.try_lock(&key).await.expect("try").expect("free");

    proxy.blackhole(true);
    let mut states = g.state_changes();
    within(SESSION, "uncertain while cut off", states.wait_for(|s| *s == LeaseState::Uncertain))
        .await
        .expect("state channel");
    close_session(&connect, user.session(), SESSION).await;
    let observer = zk::Client::connect(&connect).await.expect("observer");
    let dir = z.lock_dir(&key);
    eventually(Duration::from_secs(5), "session closed", || async {
        observer.list_children(&dir).await.map_or(true, |c| c.is_empty())
    })
    .await;
    proxy.blackhole(false);
    within(Duration::from_secs(5), "the guard is told", g.lost()).await;
    // Told at the local deadline or as the expiry reaches the client, whichever came first.
    assert!(
        matches!(g.state(), LeaseState::Lost(LostReason::SessionEnded | LostReason::DeadlinePassed)),
        "{:?}",
        g.state()
    );
    println!("user client session closed: guard {:?}", g.state());
    eventually(Duration::from_secs(5), "the user's client sees its session end", || async {
        user.state().is_terminated()
    })
    .await;
    assert_eq!(z.held_count(), 0, "a lost hold leaves the table");

    let typed = |e: &LockError| {
        matches!(e, LockError::Backend { temporary: false, source, .. }
            if source.downcast_ref::<SessionEnded>().is_some_and(|s| s.state.is_terminated()))
    };
    // A waiting acquisition fails at once, not at its deadline.
    let started = tokio::time::Instant::now();
    let e = l.lock(&key).wait(Duration::from_secs(10)).acquire().await.expect_err("the session is gone");
    assert!(typed(&e), "{e:?}");
    assert!(started.elapsed() < Duration::from_secs(2), "failed fast: {:?}", started.elapsed());
    assert!(e.to_string().contains("build the lock on a new client"), "{e}");
    let e = l.try_lock(&format!("{key}-other")).await.expect_err("every key");
    assert!(typed(&e), "{e:?}");
    assert_eq!(z.session_id(), user.session_id().0, "no session of our own was opened");
    assert!(matches!(g.release().await, Err(LockError::LeaseLost { .. })));
    let e = ZkLock::builder().client(user.clone()).build().await.expect_err("a dead client");
    assert!(typed(&e), "{e:?}");
}

/// Connection settings belong to the user's client: giving them too is refused, and Debug shows
/// neither the password nor the client's session password.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_client_refuses_connection_settings() {
    let connect = lock_zk_testing::shared_zk().connect_string();
    let user = zk::Client::connect(&connect).await.expect("user's client");
    let b = || ZkLock::builder().client(user.clone());
    for (what, builder) in [
        ("connect_string/url", b().connect_string(connect.clone())),
        ("connect_string/url", b().url(&format!("zk://{connect}/x"))),
        ("session_timeout", b().session_timeout(Duration::from_secs(1))),
        ("connection_timeout", b().connection_timeout(Duration::from_secs(1))),
        ("create_chroot", b().create_chroot(true)),
        ("auth", b().auth("u", "s3cret")),
    ] {
        let dbg = format!("{builder:?}");
        assert!(!dbg.contains("s3cret"), "{dbg}");
        assert!(dbg.contains(&format!("session {:#x}", user.session_id().0)), "{dbg}");
        match builder.build().await {
            Err(LockError::InvalidConfig { reason }) => assert!(reason.contains(what), "{what}: {reason}"),
            other => panic!("{what}: {other:?}"),
        }
    }
    // A bad root is still refused, and a chroot that does not exist is named.
    assert!(matches!(b().root("rel").build().await, Err(LockError::InvalidConfig { .. })));
    let missing =
        zk::Client::connect(&format!("{connect}/no-such-chroot-{}", run_id())).await.expect("client");
    match ZkLock::builder().client(missing).build().await {
        Err(LockError::InvalidConfig { reason }) => assert!(reason.contains("does not exist"), "{reason}"),
        other => panic!("missing chroot: {other:?}"),
    }
    let z = b().root("/user-client").build().await.expect("lock");
    let dbg = format!("{z:?}");
    assert!(dbg.contains("user_client_chroot"), "{dbg}");
}

/// Cut off without the session ending: the held guard is Uncertain, then Lost at the local
/// deadline (a session timeout after the last confirmed send, less the drift margin), exactly
/// as on a session of our own; once the client is back, the lock works on through it if the
/// server kept the session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_client_cut_off_gives_holds_up_at_the_deadline() {
    const SESSION: Duration = Duration::from_millis(2000);
    let (proxy, user, z) = proxied_user_lock(SESSION).await;
    let l = locker(&z);
    let key = format!("cut-{}", run_id());
    let g = l.try_lock(&key).await.expect("try").expect("free");
    // A renewal just before the cut: the last confirmed send is known to within its round trip.
    g.renew(Duration::from_secs(1)).await.expect("renew");
    let cut = tokio::time::Instant::now();
    proxy.blackhole(true);
    let mut states = g.state_changes();
    within(SESSION, "uncertain while cut off", states.wait_for(|s| *s == LeaseState::Uncertain))
        .await
        .expect("state channel");
    let uncertain = cut.elapsed();
    within(SESSION * 2, "lost at the deadline", g.lost()).await;
    let lost = cut.elapsed();
    println!("user client cut off: uncertain after {uncertain:?}, lost after {lost:?} (session {SESSION:?})");
    assert_eq!(g.state(), LeaseState::Lost(LostReason::DeadlinePassed));
    assert!(lost < SESSION, "told before the server may expire the session: {lost:?}");
    proxy.blackhole(false);
    eventually(Duration::from_secs(10), "the client reconnects or learns its session expired", || async {
        matches!(user.state(), zk::SessionState::SyncConnected) || user.state().is_terminated()
    })
    .await;
    if user.state().is_terminated() {
        let e = l.try_lock(&key).await.expect_err("the session is gone");
        assert!(matches!(&e, LockError::Backend { temporary: false, .. }), "{e:?}");
        println!("the server expired the session meanwhile: acquisitions fail with {e}");
    } else {
        let g2 =
            l.lock(&key).wait(Duration::from_secs(5)).acquire().await.expect("works on through the client");
        assert_eq!(z.session_id(), user.session_id().0);
        g2.release().await.expect("release");
    }
}

/// An authenticated user client gets creator-only lock nodes; an unauthenticated one open ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_client_acls_follow_its_authentication() {
    let connect = lock_zk_testing::shared_zk().connect_string();
    let id = run_id();
    let authed = zk::Client::connector()
        .with_auth("digest", format!("bob-{id}:pw").as_bytes())
        .connect(&connect)
        .await
        .expect("authenticated user client");
    let z =
        ZkLock::builder().client(authed).root(format!("/user-client-acl-{id}")).build().await.expect("lock");
    let key = "acl";
    let g = locker(&z).try_lock(key).await.expect("try").expect("free");
    let dir = z.lock_dir(key);
    let stranger = zk::Client::connect(&connect).await.expect("unauthenticated client");
    let node = stranger.list_children(&dir).await.expect("world may read")[0].clone();
    let (acl, _) = stranger.get_acl(&format!("{dir}/{node}")).await.expect("acl");
    assert!(
        acl.iter().any(|a| a.scheme() == "digest" && a.id().starts_with(&format!("bob-{id}:"))),
        "creator-only: {acl:?}"
    );
    assert_eq!(stranger.delete(&format!("{dir}/{node}"), None).await, Err(zk::Error::NoAuth));
    g.release().await.expect("release");

    let open = ZkLock::builder().client(stranger.clone()).root(format!("/user-client-open-{id}")).build();
    let open = open.await.expect("lock on an unauthenticated client");
    let g = locker(&open).try_lock(key).await.expect("try").expect("free");
    let dir = open.lock_dir(key);
    let node = stranger.list_children(&dir).await.expect("list")[0].clone();
    let (acl, _) = stranger.get_acl(&format!("{dir}/{node}")).await.expect("acl");
    assert!(acl.iter().all(|a| a.scheme() == "world"), "open: {acl:?}");
    g.release().await.expect("release");
}

// The conformance suite on locks built on user clients.
mod conformance;
