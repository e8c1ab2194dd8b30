//! Faults of the server and its sessions: a killed holder connection, a SIGKILLed and restarted
//! or paused server, deadlines shorter than its lock-wait timeout, and the holders' session bounds.

use super::*;

/// Killing the holder's connection fires its lost signal, and a waiter queued in the server gets
/// the lock at once (the server rolled back the holder's transaction), with a larger fence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_holder_connection_fires_lost_and_waiter_acquires_at_once() {
    killed_holder(Mode::Pessimistic).await;
}

/// The same for a `GET_LOCK` hold: the killed session's named lock goes to the waiter at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn named_lock_killed_holder_connection_fires_lost_and_waiter_acquires_at_once() {
    killed_holder(Mode::NamedLock).await;
}

async fn killed_holder(mode: Mode) {
    let url = shared_url();
    let (ba, bb) = (backend(&url, mode).await, backend(&url, mode).await);
    let (a, b) = (Locker::new(ba.clone()), Locker::new(bb));
    let k = key("kill");
    let g = a.lock(&k).lease(Duration::from_secs(30)).try_acquire().await.expect("try").expect("free");
    let k2 = k.clone();
    let waiter = tokio::spawn(async move {
        let g = b.lock(&k2).wait(Duration::from_secs(20)).acquire().await;
        (Instant::now(), g)
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!waiter.is_finished(), "waiter must queue while the row is locked");

    let id = ba.held_connection_id(&k).expect("held here");
    let killed_at = Instant::now();
    lock_mysql::sqlx::query("KILL CONNECTION ?").bind(id).execute(&admin(&url).await).await.expect("kill");

    let (got_at, gb) = within(Duration::from_secs(5), "waiter", waiter).await.expect("task");
    let gb = gb.expect("waiter acquires after the kill");
    assert!(
        got_at - killed_at < Duration::from_secs(1),
        "waiter took {:?} after the kill",
        got_at - killed_at
    );
    within(KEEPALIVE * 10 + Duration::from_secs(1), "lost signal", g.lost()).await;
    assert_eq!(g.state(), LeaseState::Lost(lock_core::LostReason::SessionEnded));
    assert!(gb.fence() > g.fence());
    assert!(matches!(g.release().await, Err(LockError::LeaseLost { .. })));
    gb.release().await.expect("release");
}

/// mariadbd SIGKILLed while locks are held (both modes): holders see the loss; after a restart
/// new acquisitions work and fencing tokens keep increasing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_killed_and_restarted_while_locks_are_held() {
    let server = Arc::new(MariaDbServer::start().expect("start private mariadbd"));
    let url = server.url();
    let pess = backend(&url, Mode::Pessimistic).await;
    let opt = backend(&url, Mode::Optimistic).await;
    let lp = Locker::new(pess.clone());
    let lease = Duration::from_millis(600);
    let lo = Locker::new(opt.clone()).with_watchdog_lease(lease).expect("lease");
    let (k1, k2, k3) = (key("restart1"), key("restart2"), key("restart3"));
    let g1 = lp.lock(&k1).try_acquire().await.expect("try").expect("free");
    let g2 = lp.lock(&k2).lease(Duration::from_secs(60)).try_acquire().await.expect("try").expect("free");
    let g3 = lo.lock(&k3).try_acquire().await.expect("try").expect("free");

    let s = server.clone();
    tokio::task::spawn_blocking(move || s.kill()).await.expect("join").expect("SIGKILL mariadbd");
    let killed_at = Instant::now();
    for (g, what) in [(&g1, "pessimistic (watchdog)"), (&g2, "pessimistic (fixed lease)")] {
        within(Duration::from_secs(3), what, g.lost()).await;
    }
    // The optimistic lease cannot be confirmed any more: lost at its local deadline.
    within(lease + Duration::from_secs(3), "optimistic lease", g3.lost()).await;
    assert!(killed_at.elapsed() < lease + Duration::from_secs(3));

    let s = server.clone();
    tokio::task::spawn_blocking(move || s.restart()).await.expect("join").expect("restart mariadbd");
    for (l, k, g) in [(&lp, &k1, &g1), (&lp, &k2, &g2), (&lo, &k3, &g3)] {
        let n = l.lock(k).wait(Duration::from_secs(15)).acquire().await.expect("acquire after restart");
        assert!(n.fence() > g.fence(), "fence after restart {:?} !> {:?}", n.fence(), g.fence());
        n.release().await.expect("release");
    }
    for g in [g1, g2, g3] {
        assert!(matches!(g.release().await, Err(LockError::LeaseLost { .. })));
    }
}

/// A 300 ms deadline is honoured although the server's innodb_lock_wait_timeout is 50 s and
/// `WAIT n` would only take whole seconds; a cancelled wait leaves nothing queued behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deadline_shorter_than_lock_wait_timeout_is_honoured() {
    let url = shared_url();
    let timeout_s: u64 = lock_mysql::sqlx::query_scalar("SELECT @@innodb_lock_wait_timeout")
        .fetch_one(&admin(&url).await)
        .await
        .expect("read timeout");
    assert!(timeout_s >= 10, "test assumes a long server lock-wait timeout, got {timeout_s}");
    let (a, b) = (
        Locker::new(backend(&url, Mode::Pessimistic).await),
        Locker::new(backend(&url, Mode::Pessimistic).await),
    );
    let k = key("deadline");
    let g = a.lock(&k).lease(Duration::from_secs(30)).try_acquire().await.expect("try").expect("free");
    for wait in [Duration::from_millis(300), Duration::from_millis(1300)] {
        let t = Instant::now();
        match b.lock(&k).wait(wait).acquire().await {
            Err(LockError::Timeout { waited, .. }) => {
                let took = t.elapsed();
                assert!(waited >= wait, "reported {waited:?} < {wait:?}");
                assert!(
                    took < wait + Duration::from_millis(250),
                    "{wait:?} deadline answered after {took:?}"
                );
            }
            other => panic!("expected Timeout, got {other:?}"),
        }
    }
    g.release().await.expect("release");
    let t = Instant::now();
    let g = b.lock(&k).wait(Duration::from_secs(5)).acquire().await.expect("free after release");
    assert!(t.elapsed() < Duration::from_millis(500), "timed-out waits left something behind");
    g.release().await.expect("release");
}

/// Building a client (schema check) while pessimistic locks are held must not wait for them:
/// DDL on the fence sequence would wait for every open holding transaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn building_a_client_while_locks_are_held_does_not_block() {
    let url = shared_url();
    let a = Locker::new(backend(&url, Mode::Pessimistic).await);
    let g =
        a.lock(key("ddl")).lease(Duration::from_secs(30)).try_acquire().await.expect("try").expect("free");
    let b = within(Duration::from_secs(3), "build while held", backend(&url, Mode::Pessimistic)).await;
    let k = key("ddl2");
    Locker::new(b).try_lock(&k).await.expect("try").expect("free").release().await.expect("release");
    g.release().await.expect("release");
}

/// A pessimistic holder that cannot reach its server (paused with SIGSTOP) is told: `Uncertain`
/// after one unanswered keep-alive, `Lost` before the server's idle bound (`wait_timeout`, set
/// on the holding session) can end the session, counted from the last confirmed ping's send.
/// Nested guards, also one taken through another `Locker`, are told too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_server_makes_a_pessimistic_hold_uncertain_then_lost_within_the_idle_bound() {
    paused_server(Mode::Pessimistic).await;
}

/// The same for a `GET_LOCK` hold (its session carries the same idle bound).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_server_makes_a_named_hold_uncertain_then_lost_within_the_idle_bound() {
    paused_server(Mode::NamedLock).await;
}

async fn paused_server(mode: Mode) {
    let server = Arc::new(MariaDbServer::start().expect("start private mariadbd"));
    let b = backend(&server.url(), mode).await;
    let (l, other) = (Locker::new(b.clone()), Locker::new(b.clone()));
    let k = key("paused");
    let g = l.lock(&k).try_acquire().await.expect("try").expect("free");
    let inner = l.lock(&k).owner(g.owner()).try_acquire().await.expect("try").expect("nested");
    let foreign =
        other.lock(&k).owner(g.owner()).try_acquire().await.expect("try").expect("nested elsewhere");
    let mut states = g.state_changes();
    server.pause().expect("SIGSTOP mariadbd");
    let paused = Instant::now();
    within(KEEPALIVE * 10, "uncertain", states.wait_for(|s| *s == LeaseState::Uncertain))
        .await
        .expect("watch");
    // KEEPALIVE 100 ms -> the server ends an idle holding session after 2 s.
    let bound = Duration::from_secs(2);
    within(bound + Duration::from_secs(1), "lost", g.lost()).await;
    let told = paused.elapsed();
    for (what, guard) in [("nested", &inner), ("nested through another Locker", &foreign)] {
        within(Duration::from_millis(100), what, guard.lost()).await;
    }
    server.resume().expect("SIGCONT mariadbd");
    eprintln!(
        "{mode:?}, paused server: holder uncertain, then lost after {told:?} (server idle bound {bound:?})"
    );
    assert!(told < bound, "told {told:?} after the pause, at or past the server's bound {bound:?}");
    // The row is free again once the server has ended the session (the client closed it).
    let n = Locker::new(backend(&server.url(), mode).await);
    let g2 = n.lock(&k).wait(Duration::from_secs(10)).acquire().await.expect("free after the loss");
    assert!(g2.fence() > g.fence());
    g2.release().await.expect("release");
    for guard in [foreign, inner, g] {
        assert!(matches!(guard.release().await, Err(LockError::LeaseLost { .. })));
    }
}

/// The idle bound (and autocommit off) is set on holding sessions only, which come from the
/// backend's private pool: the shared pool keeps the server-wide settings. (That the server ends
/// a silent holder's session is shown end to end by `history::mysql_holder_processes`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shared_pool_never_carries_a_holders_session_settings() {
    let url = shared_url();
    let b = builder(&url, Mode::Pessimistic).max_connections(1).build().await.expect("build");
    let l = Locker::new(Arc::new(b.clone()));
    let k = key("idlebound");
    let g = l.lock(&k).try_acquire().await.expect("try").expect("free");
    g.release().await.expect("release");
    // Holders take their connections from a private pool set up for holding (autocommit off,
    // the idle bounds); the shared pool, which the application may use too, never sees them.
    let mut conn = b.pool().acquire().await.expect("pooled");
    let restored: i64 = lock_mysql::sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT @@SESSION.autocommit = 1 AND {IDLE_BOUNDS_ARE_GLOBAL} \
            AND @@SESSION.net_read_timeout = @@GLOBAL.net_read_timeout \
            AND @@SESSION.net_write_timeout = @@GLOBAL.net_write_timeout"
    )))
    .fetch_one(&mut *conn)
    .await
    .expect("query");
    assert_eq!(restored, 1, "a pooled connection kept the holder's session timeouts");
}

/// A lock granted after a wait in the server's queue stays held past the server's idle bound
/// (2 s for a 100 ms keepalive), whether the wait was short (the hold counts from the waiting
/// statement's send, no re-anchoring ping) or longer than that bound itself (counted from its
/// send the hold would be over at once: it is anchored at the answer and pinged at once).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grants_after_short_and_long_waits_stay_held_past_the_idle_bound() {
    let cases = [Mode::Pessimistic, Mode::NamedLock].into_iter().flat_map(|mode| {
        [Duration::from_millis(20), Duration::from_millis(2500)].map(|wait| held_after_wait(mode, wait))
    });
    futures_util::future::join_all(cases).await;
}

async fn held_after_wait(mode: Mode, first_holds: Duration) {
    let url = shared_url();
    let (a, b, c) = (
        Locker::new(backend(&url, mode).await),
        Locker::new(backend(&url, mode).await),
        Locker::new(backend(&url, mode).await),
    );
    let k = key("held-after-wait");
    let g = a.lock(&k).try_acquire().await.expect("try").expect("free");
    let waiter = {
        let k = k.clone();
        tokio::spawn(async move { b.lock(&k).wait(Duration::from_secs(10)).acquire().await })
    };
    // How long the waiter waits: the holder's time, not a synchronisation.
    tokio::time::sleep(first_holds).await;
    g.release().await.expect("release");
    let w = within(Duration::from_secs(5), "waiter granted", waiter).await.expect("join").expect("acquire");
    tokio::time::sleep(Duration::from_millis(2300)).await;
    // Not `Held`: a ping slower than the keepalive on a loaded machine is `Uncertain`.
    assert!(!w.is_lost(), "{mode:?}: lost {:?} after a {first_holds:?} wait", w.state());
    let other = c.lock(&k).try_acquire().await.expect("try");
    assert!(other.is_none(), "{mode:?}: the key was free {first_holds:?} after a wait");
    w.release().await.expect("release");
}
