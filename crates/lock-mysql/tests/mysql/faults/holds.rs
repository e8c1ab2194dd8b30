//! Holds under faults: leases only extended, a loss reaching every guard, optimistic rows
//! reclaimed, and named locks dropped while waiting or nested.

use super::*;

/// MariaDB: a released key keeps its row while in use (its next acquisition is one round trip),
/// rows idle for a while (released, or expired: a crashed holder) are swept, and fences keep
/// increasing for a key whose row came and went.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn optimistic_rows_are_reclaimed_and_fences_keep_growing() {
    let url = shared_url();
    let b = backend(&url, Mode::Optimistic).await;
    if !b.is_mariadb() {
        eprintln!("SKIPPED optimistic_rows_are_reclaimed: rows are kept on MySQL (per-row version fences)");
        return;
    }
    let l = Locker::new(b.clone());
    let pool = admin(&url).await;
    let rows = |k: String| {
        let (pool, table) = (pool.clone(), b.table().to_owned());
        async move {
            let n: i64 = lock_mysql::sqlx::query_scalar(lock_mysql::sqlx::AssertSqlSafe(format!(
                "SELECT COUNT(*) FROM `{table}` WHERE name = ?"
            )))
            .bind(k.into_bytes())
            .fetch_one(&pool)
            .await
            .expect("count");
            n
        }
    };
    // The sweep removes rows idle for a while; age the row instead of waiting.
    let age = |k: String| {
        let (pool, table) = (pool.clone(), b.table().to_owned());
        async move {
            lock_mysql::sqlx::query(lock_mysql::sqlx::AssertSqlSafe(format!(
                "UPDATE `{table}` SET expires_at = UTC_TIMESTAMP(6) - INTERVAL 2 MINUTE WHERE name = ?"
            )))
            .bind(k.into_bytes())
            .execute(&pool)
            .await
            .expect("age");
        }
    };
    // Every 256th acquisition of a client sweeps in the background.
    let sweep = |round: usize| {
        let (l, k) = (l.clone(), key(&format!("reclaim-sweep-{round}")));
        async move {
            for i in 0..256 {
                let g = l
                    .lock(format!("{k}-{i}"))
                    .lease(Duration::from_secs(5))
                    .try_acquire()
                    .await
                    .expect("try");
                g.expect("free").release().await.expect("release");
            }
        }
    };
    let swept = |k: String, what: &'static str| {
        let rows = &rows;
        async move {
            let t = Instant::now();
            while rows(k.clone()).await != 0 {
                assert!(t.elapsed() < Duration::from_secs(5), "{what} was not swept");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    let k = key("reclaim");
    let g = l.lock(&k).lease(Duration::from_secs(5)).try_acquire().await.expect("try").expect("free");
    let f1 = g.fence();
    g.release().await.expect("release");
    assert_eq!(rows(k.clone()).await, 1, "a released key in use keeps its row");
    age(k.clone()).await;
    sweep(0).await;
    swept(k.clone(), "an idle released row").await;
    let g = l.lock(&k).lease(Duration::from_millis(50)).try_acquire().await.expect("try").expect("free");
    assert!(g.fence() > f1, "fence went back after the row was deleted");
    g.abandon(); // a crashed holder: its row stays until swept
    assert_eq!(rows(k.clone()).await, 1);
    age(k.clone()).await;
    sweep(1).await;
    swept(k.clone(), "an expired row").await;
}

/// Optimistic renewals and nested acquisitions only ever move the expiry later: a nested guard
/// with a 200 ms lease, renewed with 200 ms and released, leaves the outer 2 s lease running,
/// and so does a plain 200 ms renewal of a 2 s hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn optimistic_renew_and_nesting_never_shorten_the_lease() {
    let url = shared_url();
    let (a, b) = (
        Locker::new(backend(&url, Mode::Optimistic).await),
        Locker::new(backend(&url, Mode::Optimistic).await),
    );
    let (long, short) = (Duration::from_secs(2), Duration::from_millis(200));
    let k = key("nestshort");
    let outer = a.lock(&k).lease(long).try_acquire().await.expect("try").expect("free");
    let inner =
        a.lock(&k).owner(outer.owner()).lease(short).try_acquire().await.expect("try").expect("nested");
    inner.renew(short).await.expect("renew nested");
    inner.release().await.expect("release nested");
    // 200 ms leases would have ended by 500 ms; the outer 2 s lease still runs until 2 s.
    refused_for(&b, &k, Duration::from_millis(600), "after a short nested lease").await;
    let left = b.backend().inspect(&k).await.expect("inspect").remaining.expect("held");
    assert!(left > Duration::from_millis(800), "outer lease cut to {left:?}");
    outer.release().await.expect("release");

    let k = key("renewshort");
    let g = a.lock(&k).lease(long).try_acquire().await.expect("try").expect("free");
    g.renew(short).await.expect("renew");
    refused_for(&b, &k, Duration::from_millis(600), "after a short renewal").await;
    let left = b.backend().inspect(&k).await.expect("inspect").remaining.expect("held");
    assert!(left > Duration::from_millis(800), "lease cut to {left:?}");
    g.release().await.expect("release");
}

/// Resolves to when `guard`'s lost signal fired.
fn lost_at(guard: &lock_core::LockGuard) -> tokio::task::JoinHandle<Instant> {
    let lost = guard.lost();
    tokio::spawn(async move {
        lost.await;
        Instant::now()
    })
}

/// `KILL CONNECTION` of a pessimistic holder: every guard of the hold (the outer one, a nested
/// one through the same `Locker`, and one through another `Locker`, which carries its own
/// signal) is told `Lost`, at the latest one keep-alive period after a queued waiter got the
/// row. The server frees the row at once without telling the holder, so the holder cannot know
/// sooner than its next ping: only the fencing token covers that gap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_connection_reaches_every_guard_within_one_keepalive_of_the_successor() {
    let url = shared_url();
    let ba = backend(&url, Mode::Pessimistic).await;
    let (a, a2, b) = (
        Locker::new(ba.clone()),
        Locker::new(ba.clone()),
        Locker::new(backend(&url, Mode::Pessimistic).await),
    );
    let k = key("killnested");
    let outer = a.lock(&k).try_acquire().await.expect("try").expect("free");
    let same = a.lock(&k).owner(outer.owner()).try_acquire().await.expect("try").expect("nested");
    let other = a2.lock(&k).owner(outer.owner()).try_acquire().await.expect("try").expect("nested elsewhere");
    let told: Vec<_> = [&outer, &same, &other].into_iter().map(lost_at).collect();
    let k2 = k.clone();
    let waiter = tokio::spawn(async move {
        let g = b.lock(&k2).wait(Duration::from_secs(20)).acquire().await;
        (Instant::now(), g)
    });
    let pool = admin(&url).await;
    let queued = format!("%WHERE name = {}%FOR UPDATE", "X'");
    until_running(&pool, &queued, "waiter queued in the server").await;
    let id = ba.held_connection_id(&k).expect("held here");
    lock_mysql::sqlx::query("KILL CONNECTION ?").bind(id).execute(&pool).await.expect("kill");
    let (granted, g) = within(Duration::from_secs(5), "waiter", waiter).await.expect("task");
    let g = g.expect("the waiter gets the row");
    let mut late = Duration::ZERO;
    for (what, t) in ["outer", "nested", "nested through another Locker"].into_iter().zip(told) {
        let at = within(KEEPALIVE * 10, what, t).await.expect("task");
        late = late.max(at.saturating_duration_since(granted));
    }
    eprintln!(
        "killed holder: every guard told at most {late:?} after the successor's grant (keep-alive {KEEPALIVE:?})"
    );
    assert!(late <= KEEPALIVE + Duration::from_millis(100), "told {late:?} after the successor's grant");
    assert!(g.fence() > outer.fence());
    g.release().await.expect("release");
    for guard in [other, same, outer] {
        assert!(matches!(guard.release().await, Err(LockError::LeaseLost { .. })));
    }
}

/// An optimistic lease taken away behind the holder: the renewal that finds out tells every
/// guard of the hold, also a nested one through another `Locker` with a long fixed lease, whose
/// own deadline is far off and which renews nothing itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn optimistic_loss_reaches_every_guard_of_the_hold() {
    let url = shared_url();
    let bo = backend(&url, Mode::Optimistic).await;
    let a = Locker::new(bo.clone()).with_watchdog_lease(Duration::from_millis(300)).expect("lease");
    let a2 = Locker::new(bo.clone());
    let k = key("optnested");
    let outer = a.lock(&k).try_acquire().await.expect("try").expect("free");
    let same = a.lock(&k).owner(outer.owner()).try_acquire().await.expect("try").expect("nested");
    let other = a2
        .lock(&k)
        .owner(outer.owner())
        .lease(Duration::from_secs(30))
        .try_acquire()
        .await
        .expect("try")
        .expect("nested elsewhere");
    // Someone else takes the row over (an administrator, or a holder after a clock jump).
    lock_mysql::sqlx::query(lock_mysql::sqlx::AssertSqlSafe(format!(
        "UPDATE `{}` SET owner = X'00000000000000000000000000000001' WHERE name = ?",
        bo.table()
    )))
    .bind(k.as_bytes())
    .execute(&admin(&url).await)
    .await
    .expect("take over");
    for (what, g) in [("outer", &outer), ("nested", &same), ("nested through another Locker", &other)] {
        within(Duration::from_secs(2), what, g.lost()).await;
    }
    for guard in [other, same, outer] {
        assert!(matches!(guard.release().await, Err(LockError::LeaseLost { .. })));
    }
}

/// How many sessions wait in `GET_LOCK` on the server now (a `PREPARE` naming it, which the
/// backends' connections run when warmed, is no wait).
async fn get_lock_waits(admin: &MySqlPool) -> i64 {
    crate::common::lock_waits_like(admin, "%GET_LOCK(%").await
}

/// A named acquisition dropped while it waits in the server's GET_LOCK queue is killed there
/// (`KILL QUERY`): no GET_LOCK is left waiting, and when the holder releases, the lock is not
/// granted to the dropped waiter's session but free for the next client at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn named_lock_dropped_wait_leaves_no_grant() {
    // A private server: the test counts every GET_LOCK wait on it, and on the shared server
    // another test's wait ending at the wrong moment hid this one's.
    let server = Arc::new(MariaDbServer::start().expect("start private mariadbd"));
    let url = server.url();
    let admin = admin(&url).await;
    let (a, b, c) = (
        Locker::new(backend(&url, Mode::NamedLock).await),
        Locker::new(backend(&url, Mode::NamedLock).await),
        Locker::new(backend(&url, Mode::NamedLock).await),
    );
    let k = key("dropped-wait");
    let name = lock_mysql::lock_name(&k);
    let holder_id = || async {
        let id: Option<i64> = lock_mysql::sqlx::query_scalar("SELECT IS_USED_LOCK(?)")
            .bind(&name)
            .fetch_one(&admin)
            .await
            .expect("IS_USED_LOCK");
        id
    };
    for round in 0..3 {
        let g = a.lock(&k).try_acquire().await.expect("try").expect("free");
        let before = get_lock_waits(&admin).await;
        let (b2, k2) = (b.clone(), k.clone());
        let waiter = tokio::spawn(async move { b2.lock(&k2).wait(Duration::from_secs(30)).acquire().await });
        until(Duration::from_secs(10), "the waiter waits in GET_LOCK", || async {
            get_lock_waits(&admin).await > before
        })
        .await;
        waiter.abort();
        assert!(waiter.await.expect_err("aborted").is_cancelled());
        // The server's wait ends (killed), well before its 30 s timeout.
        until(Duration::from_secs(2), "the dropped GET_LOCK wait is killed", || async {
            get_lock_waits(&admin).await == before
        })
        .await;
        let held_by = holder_id().await;
        g.release().await.expect("release");
        assert!(held_by.is_some());
        // Nobody was granted the lock for the dropped waiter: the next client gets it at once.
        let t = Instant::now();
        let n = c.try_lock(&k).await.expect("try").expect("the dropped waiter was granted the lock");
        assert!(t.elapsed() < Duration::from_millis(500));
        n.release().await.expect("release");
        assert_eq!(holder_id().await, None, "round {round}: a session still holds the name");
    }
}

/// One hold is one GET_LOCK count on its session: nested acquisitions (same owner) are counted
/// in the client, the outermost release frees the name on the server, and a connection goes
/// back to the pool holding no named lock (one pooled connection reused for every step).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn named_lock_nesting_is_one_server_lock_and_pooled_connections_hold_none() {
    let url = shared_url();
    let admin = admin(&url).await;
    let b = MySqlLock::builder()
        .url(&url)
        .mode(Mode::NamedLock)
        .keepalive(KEEPALIVE)
        .max_connections(2)
        .build()
        .await
        .expect("build");
    let l = Locker::new(Arc::new(b.clone()));
    let k = key("nested");
    let name = lock_mysql::lock_name(&k);
    let count_locks = || async {
        let id: Option<i64> = lock_mysql::sqlx::query_scalar("SELECT IS_USED_LOCK(?)")
            .bind(&name)
            .fetch_one(&admin)
            .await
            .expect("IS_USED_LOCK");
        id
    };
    for _ in 0..3 {
        let g = l.lock(&k).try_acquire().await.expect("try").expect("free");
        let inner = l.lock(&k).owner(g.owner()).try_acquire().await.expect("try").expect("nested");
        assert_eq!(inner.fence(), g.fence(), "a nested acquisition has the outer hold's token");
        let id = count_locks().await.expect("held on the server");
        assert_eq!(Some(u64::try_from(id).expect("id")), b.held_connection_id(&k));
        inner.release().await.expect("release inner");
        assert!(count_locks().await.is_some(), "the inner release freed the outer hold");
        g.release().await.expect("release");
        assert_eq!(count_locks().await, None, "the outermost release did not free the name");
    }
    // The pool's connections (both at once, so neither is handed out twice) hold no named lock.
    let mut conns = vec![b.pool().acquire().await.expect("conn"), b.pool().acquire().await.expect("conn")];
    for conn in &mut conns {
        let n: u32 = lock_mysql::sqlx::query_scalar("SELECT RELEASE_ALL_LOCKS()")
            .fetch_one(&mut **conn)
            .await
            .expect("RELEASE_ALL_LOCKS");
        assert_eq!(n, 0, "a pooled connection still held a named lock");
    }
}
