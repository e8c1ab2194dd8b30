//! Cancelled and cut-off acquisitions: what they leave behind, and that a late clean-up never
//! frees a later grant.

use super::*;

/// Cuts off `n` acquisitions of a free key at offsets spread over twice the median acquire
/// time (busy-polled with `Instant`: tokio timers have 1 ms resolution) and checks after each
/// that another client gets the key within `bound`. Returns (cut off, completed, max delay).
async fn cancel_sweep(mode: Mode, n: u32, bound: Duration) -> (u32, u32, Duration) {
    let url = shared_url();
    let (a, b) = (Locker::new(backend(&url, mode).await), Locker::new(backend(&url, mode).await));
    let k = key("cancel");
    let lease = Duration::from_millis(300);
    let mut times = Vec::new();
    for _ in 0..100 {
        let t = std::time::Instant::now();
        let g = a.lock(&k).lease(lease).try_acquire().await.expect("try").expect("free");
        times.push(t.elapsed());
        g.release().await.expect("release");
    }
    times.sort();
    let median = times[times.len() / 2];
    let (mut cut, mut done, mut worst) = (0, 0, Duration::ZERO);
    for i in 0..n {
        let offset = median * 2 * i / n;
        let finished = cut_after(a.lock(&k).lease(lease).try_acquire(), offset).await;
        match finished {
            Some(r) => {
                done += 1;
                r.expect("acquire").expect("free").release().await.expect("release");
            }
            None => cut += 1,
        }
        // A probe sent `at` after the cut-off that finds the key held shows it held then.
        let t = Instant::now();
        loop {
            let at = t.elapsed();
            if let Some(g) = b.try_lock(&k).await.expect("try") {
                g.release().await.expect("release");
                worst = worst.max(at);
                break;
            }
            assert!(
                at < bound,
                "{mode:?}: key still held {at:?} after an acquisition cut off at {offset:?} (median {median:?})"
            );
            tokio::task::yield_now().await;
        }
    }
    eprintln!(
        "{mode:?}: median acquire {median:?}; {cut} cut off, {done} completed; key free again within {worst:?}"
    );
    (cut, done, worst)
}

/// 2000 optimistic acquisitions of a free key cut off around the median acquire time leave
/// nothing behind: the key is free again within 50 ms every time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn optimistic_cancelled_acquisitions_leave_nothing_behind() {
    let (cut, _, _) = cancel_sweep(Mode::Optimistic, 2000, Duration::from_millis(50)).await;
    assert!(cut > 200, "too few acquisitions were cut off ({cut})");
}

/// The same for named acquisitions (the cut-off session's connection is closed, and its
/// GET_LOCK with it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn named_lock_cancelled_acquisitions_leave_nothing_behind() {
    let (cut, _, _) = cancel_sweep(Mode::NamedLock, 2000, Duration::from_millis(50)).await;
    assert!(cut > 200, "too few acquisitions were cut off ({cut})");
}

/// The same for pessimistic acquisitions (the cut-off transaction's connection is closed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pessimistic_cancelled_acquisitions_leave_nothing_behind() {
    let (cut, _, _) = cancel_sweep(Mode::Pessimistic, 2000, Duration::from_millis(50)).await;
    assert!(cut > 200, "too few acquisitions were cut off ({cut})");
}

/// The cleanup of a cut-off optimistic acquisition only undoes that attempt: when the same
/// owner acquires again at once on another client (nesting into the cut-off grant if it
/// landed), that grant is never freed by the late cleanup, and its release frees the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_attempt_cleanup_never_frees_a_later_grant_of_the_same_owner() {
    let url = shared_url();
    let (a, c) = (
        Locker::new(backend(&url, Mode::Optimistic).await),
        Locker::new(backend(&url, Mode::Optimistic).await),
    );
    let b = Locker::new(backend(&url, Mode::Optimistic).await);
    let k = key("latecleanup");
    let lease = Duration::from_millis(400);
    let t = std::time::Instant::now();
    a.lock(&k)
        .lease(lease)
        .try_acquire()
        .await
        .expect("try")
        .expect("free")
        .release()
        .await
        .expect("release");
    let one = t.elapsed();
    let n = 400;
    let mut before: Option<OwnerToken> = None;
    for i in 0..n {
        let owner = OwnerToken::random();
        let finished = cut_after(a.lock(&k).owner(owner).lease(lease).try_acquire(), one * 2 * i / n).await;
        let Some(g) = c.lock(&k).owner(owner).lease(lease).try_acquire().await.expect("try") else {
            let info = b.backend().inspect(&k).await.expect("inspect");
            let earlier = before.map(|o| format!("{:032x}", o.as_u128())[..8].to_owned());
            panic!(
                "iteration {i}: the same owner was refused; holder {:?} (last iteration's owner {earlier:?})",
                info.owner
            );
        };
        before = Some(owner);
        // However late the cut-off attempt's cleanup runs, it must leave this grant alone.
        assert!(b.try_lock(&k).await.expect("try").is_none(), "iteration {i}: a later grant was freed");
        tokio::task::yield_now().await;
        assert!(b.try_lock(&k).await.expect("try").is_none(), "iteration {i}: a later grant was freed");
        g.release().await.expect("release");
        if let Some(Ok(Some(g0))) = finished {
            g0.release().await.expect("release");
        }
        // A cut-off statement may still sit in `a`'s connection and land after all of the above
        // (a brief grant that its undo then ends): `a`'s next attempt on the key waits for that
        // undo (the per-key gate), so once it answers, nothing may hold the key any more.
        let mut next = None;
        for _ in 0..10 {
            match a.try_lock(&k).await {
                Ok(n) => {
                    next = n;
                    break;
                }
                // The wait at the gate has the try's own bound (2 s): on a loaded machine the
                // undo behind it can take longer.
                Err(e) if e.is_temporary() => {}
                Err(e) => panic!("try: {e}"),
            }
        }
        let t = Instant::now();
        while next.is_none() {
            assert!(t.elapsed() < Duration::from_millis(100), "iteration {i}: a hold was left behind");
            tokio::task::yield_now().await;
            next = b.try_lock(&k).await.expect("try");
        }
        next.expect("free").release().await.expect("release");
    }
}

/// A late release of an optimistic guard whose lease ran out and was taken again by the same
/// owner (on another client) does not free the new grant: release compares the grant's version.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_release_of_a_lost_hold_never_frees_a_later_grant_of_the_same_owner() {
    let url = shared_url();
    let (ba, bc) = (backend(&url, Mode::Optimistic).await, backend(&url, Mode::Optimistic).await);
    let (a, c) = (Locker::new(ba.clone()), Locker::new(bc));
    let b = Locker::new(backend(&url, Mode::Optimistic).await);
    let k = key("laterelease");
    let g1 = a.lock(&k).lease(Duration::from_millis(100)).try_acquire().await.expect("try").expect("free");
    let owner = g1.owner();
    within(Duration::from_secs(2), "local loss", g1.lost()).await;
    until(Duration::from_secs(2), "lease over on the server", || async {
        !b.backend().inspect(&k).await.expect("inspect").held
    })
    .await;
    let g2 = c
        .lock(&k)
        .owner(owner)
        .lease(Duration::from_secs(5))
        .try_acquire()
        .await
        .expect("try")
        .expect("free");
    // What a release of g1 sent before its loss was known, arriving now, would do.
    assert!(!ba.release(&k, owner).await.expect("late release"), "the late release claimed a hold");
    assert!(b.try_lock(&k).await.expect("try").is_none(), "the late release freed the later grant");
    g2.release().await.expect("release");
    assert!(matches!(g1.release().await, Err(LockError::LeaseLost { .. })));
}

/// Starts an optimistic acquisition by `owner` while `admin` holds the row, waits until its
/// statement is blocked in the server, then cuts it off: its cleanup is queued behind it on
/// the same connection and so runs only after whatever the test does to the row meanwhile.
async fn cut_off_while_blocked(l: &Locker, k: &str, owner: OwnerToken, admin: &MySqlPool) {
    use std::task::Poll;
    let mut fut = Box::pin(l.lock(k).owner(owner).lease(Duration::from_secs(5)).try_acquire());
    let t = Instant::now();
    loop {
        assert!(matches!(futures_util::poll!(fut.as_mut()), Poll::Pending), "acquired through a row lock");
        if statements_like(admin, "%@dlock_attempt%").await > 0 {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(10), "the attempt never reached the server");
        tokio::task::yield_now().await;
    }
    drop(fut);
}

/// The row as the lock table has it: (owner, holds).
async fn row(pool: &MySqlPool, table: &str, k: &str) -> (Option<Vec<u8>>, u32) {
    lock_mysql::sqlx::query_as(lock_mysql::sqlx::AssertSqlSafe(format!(
        "SELECT owner, holds FROM `{table}` WHERE name = ?"
    )))
    .bind(k.as_bytes())
    .fetch_one(pool)
    .await
    .expect("row")
}

/// Deterministic late cleanups (the cut-off statement is held back by an administrator's row
/// lock, and its cleanup is queued behind it): (1) an attempt that did not apply, followed by a
/// grant to the same owner token, leaves that grant alone; (2) an attempt that applied, then
/// nested into by the same owner (overwriting the row's `attempt`), gives back exactly its
/// own hold, so the later holder's release frees the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_cleanup_of_a_blocked_attempt_undoes_only_that_attempt() {
    let url = shared_url();
    let ba = backend(&url, Mode::Optimistic).await;
    let (a, b) = (Locker::new(ba.clone()), Locker::new(backend(&url, Mode::Optimistic).await));
    let table = ba.table().to_owned();
    let pool = MySqlPoolOptions::new().max_connections(4).connect(&url).await.expect("admin pool");
    let cleaned = || async {
        // The cut-off attempt's connection returns to the pool once its cleanup is done.
        until(Duration::from_secs(10), "cleanup done", || async {
            ba.pool().num_idle() == ba.pool().size() as usize
        })
        .await
    };
    let owner = OwnerToken::random();
    let hex = |o: OwnerToken| format!("X'{:032x}'", o.as_u128());

    // (1) Held by someone else while the attempt waits; then granted to the same owner token.
    let k = key("blocked1");
    let x = b.lock(&k).lease(Duration::from_secs(30)).try_acquire().await.expect("try").expect("free");
    let mut tx = pool.begin().await.expect("begin");
    lock_mysql::sqlx::query(lock_mysql::sqlx::AssertSqlSafe(format!(
        "SELECT 1 FROM `{table}` WHERE name = ? FOR UPDATE"
    )))
    .bind(k.as_bytes())
    .execute(&mut *tx)
    .await
    .expect("row lock");
    cut_off_while_blocked(&a, &k, owner, &pool).await;
    lock_mysql::sqlx::query(lock_mysql::sqlx::AssertSqlSafe(format!(
        "UPDATE `{table}` SET owner = {}, version = NEXTVAL(`{table}_fence`), holds = 1, \
         expires_at = UTC_TIMESTAMP(6) + INTERVAL 30 SECOND WHERE name = ?",
        hex(owner)
    )))
    .bind(k.as_bytes())
    .execute(&mut *tx)
    .await
    .expect("grant to the same owner");
    tx.commit().await.expect("commit");
    cleaned().await;
    assert_eq!(
        row(&pool, &table, &k).await,
        (Some(owner.as_u128().to_be_bytes().to_vec()), 1),
        "(1) the later grant was touched"
    );
    drop(x);

    // (2) Free while the attempt waits (it applies), then nested into by the same owner.
    let k = key("blocked2");
    let g = b.lock(&k).lease(Duration::from_secs(30)).try_acquire().await.expect("try").expect("free");
    g.release().await.expect("release");
    lock_mysql::sqlx::query(lock_mysql::sqlx::AssertSqlSafe(format!(
        "INSERT IGNORE INTO `{table}` (name) VALUES (?)"
    )))
    .bind(k.as_bytes())
    .execute(&pool)
    .await
    .expect("free row");
    let mut tx = pool.begin().await.expect("begin");
    let lock_row = format!("SELECT 1 FROM `{table}` WHERE name = ? FOR UPDATE");
    lock_mysql::sqlx::query(lock_mysql::sqlx::AssertSqlSafe(lock_row.clone()))
        .bind(k.as_bytes())
        .execute(&mut *tx)
        .await
        .expect("row lock");
    cut_off_while_blocked(&a, &k, owner, &pool).await;
    // A second administrator queues behind the attempt, so it gets the row between the
    // attempt's grant and its cleanup.
    let (pool2, k2, table2) = (pool.clone(), k.clone(), table.clone());
    let nest = tokio::spawn(async move {
        let mut tx = pool2.begin().await.expect("begin");
        lock_mysql::sqlx::query(lock_mysql::sqlx::AssertSqlSafe(lock_row))
            .bind(k2.as_bytes())
            .execute(&mut *tx)
            .await
            .expect("row lock 2");
        let n = lock_mysql::sqlx::query(lock_mysql::sqlx::AssertSqlSafe(format!(
            "UPDATE `{table2}` SET holds = holds + 1, attempt = X'000000000000000000000000000000ff' \
             WHERE name = ? AND owner = {}",
            hex(owner)
        )))
        .bind(k2.as_bytes())
        .execute(&mut *tx)
        .await
        .expect("nest")
        .rows_affected();
        tx.commit().await.expect("commit");
        n
    });
    until_running(&pool, "SELECT 1 FROM%FOR UPDATE", "second administrator queued").await;
    tx.commit().await.expect("commit");
    let nested = nest.await.expect("task");
    cleaned().await;
    if nested == 1 {
        assert_eq!(
            row(&pool, &table, &k).await,
            (Some(owner.as_u128().to_be_bytes().to_vec()), 1),
            "(2) the cut-off hold was not given back"
        );
    } else {
        // The server ran the attempt and its cleanup back to back (the cleanup was already
        // queued on that connection), so the second administrator found the row free: the
        // interleaving did not happen this time, and the attempt must have left nothing.
        eprintln!("(2) the cleanup ran before the nesting could queue between; checked that nothing is left");
        assert_eq!(row(&pool, &table, &k).await, (None, 0), "(2) the cut-off attempt left a hold");
    }
}
