//! Fault tests against real mariadbd processes: a killed holder connection, a SIGKILLed and
//! restarted server, deadlines shorter than the server's lock-wait timeout, hostile keys and
//! table names, and the seed's business CAS (the flash sale's stock update; the whole sale is
//! `examples/flash_sale.rs`).
//!
//! Run: `cargo test -p lock-mysql --test faults`.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use lock_core::backend::{AcquireRequest, LockBackend, Side};
use lock_core::{LeaseSignal, LeaseState, LockError, Locker, OwnerToken};
use lock_mysql::sqlx::AssertSqlSafe;
use lock_mysql::sqlx::mysql::{MySqlPool, MySqlPoolOptions};
use lock_mysql::{Mode, MySqlLock, validate_table_name};
use lock_testkit::server::MariaDbServer;
use lock_testkit::{cut_after, within};
use tokio::time::Instant;

mod common;

use common::{IDLE_BOUNDS_ARE_GLOBAL, KEEPALIVE, admin, backend, builder, shared_url, statements_like};

fn key(case: &str) -> String {
    format!("faults-{case}-{}", OwnerToken::random())
}

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

/// Keys that break naive SQL splicing are carried exactly (both modes); distinct keys that an
/// unescaping layer would merge stay distinct; an over-long key reaching the backend directly
/// gets a typed error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_keys_are_bound_never_spliced() {
    let url = shared_url();
    for mode in [Mode::Pessimistic, Mode::Optimistic, Mode::NamedLock] {
        let (ca, cb) = (backend(&url, mode).await, backend(&url, mode).await);
        let (a, b) = (Locker::new(ca.clone()), Locker::new(cb));
        let base = key("odd");
        let odd = [
            "'",
            "\\'",
            "\\",
            "\\\\",
            "\"",
            "' OR '1'='1",
            "x'; DROP TABLE dlock_rows; --",
            "--",
            "-- ",
            ";",
            "/*",
            "%",
            "_",
            "ünïcødé-ключ-锁-🔒",
            "ǅ",
            "a ",
            "A",
            "a",
        ];
        let mut guards = Vec::new();
        for o in odd {
            let k = format!("{base}{o}");
            let g =
                a.try_lock(&k).await.expect("odd key").unwrap_or_else(|| panic!("{mode:?}: {k:?} not free"));
            assert!(b.try_lock(&k).await.expect("odd key").is_none(), "{mode:?}: {k:?} not exclusive");
            guards.push(g);
        }
        // Trailing space, case and LIKE wildcards did not alias: all 18 were free.
        assert!(b.try_lock(&base).await.expect("base").is_some(), "{mode:?}: prefix aliased");
        for g in guards {
            g.release().await.expect("release");
        }
        // Past the validating core: 256 bytes do not fit VARBINARY(255) -> typed error (not a
        // truncated, aliasing row: INSERT IGNORE would silently cut it to 255 bytes).
        let signal = LeaseSignal::new();
        let long = "k".repeat(256);
        let req = AcquireRequest {
            key: &long,
            owner: OwnerToken::random(),
            lease: Duration::from_secs(1),
            wait_until: None,
            signal: &signal,
            side: Side::Exclusive,
        };
        match ca.try_acquire(&req).await {
            Err(LockError::InvalidKey { .. }) => {}
            other => panic!("{mode:?}: over-long key gave {other:?}"),
        }
    }
}

/// The waiting statement (spliced text: SET STATEMENT takes no placeholders) carries hostile
/// keys exactly, and a lock won by waiting in the server's queue is released promptly: the wait
/// used to be a one-off prepared statement whose EXECUTE + CLOSE pair let Nagle hold back the
/// waiter's COMMIT until the server's delayed ACK (~40 ms per queued acquisition, with the row
/// still locked; 8 contending clients managed 165 acquisitions/s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_waiters_carry_hostile_keys_and_release_promptly() {
    let url = shared_url();
    // A table of its own, so that its waiting statements are told apart in the processlist.
    let table = "dlock_queued_rows";
    let client = || async {
        let lock = MySqlLock::builder().url(&url).table(table).keepalive(KEEPALIVE).build().await;
        Arc::new(lock.expect("build"))
    };
    let (a, b) = (Locker::new(client().await), Locker::new(client().await));
    let admin = admin(&url).await;
    let queued = format!("%`{table}` WHERE name = % FOR UPDATE");
    let base = key("queued");
    let mut releases = Vec::new();
    for odd in ["", "'", "\\'", "x'; DROP TABLE dlock_rows; --", "ünïcødé-锁-🔒", "%", "a "] {
        let k = format!("{base}{odd}");
        let g = a.lock(&k).try_acquire().await.expect("try").unwrap_or_else(|| panic!("{k:?} not free"));
        let (b2, k2) = (b.clone(), k.clone());
        let waiter = tokio::spawn(async move { b2.lock(&k2).wait(Duration::from_secs(10)).acquire().await });
        // Wait until the waiter is queued in the server.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if statements_like(&admin, &queued).await > 0 {
                break;
            }
            assert!(Instant::now() < deadline, "{k:?}: waiter never queued in the server");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        g.release().await.expect("release");
        let g2 =
            within(Duration::from_secs(5), "queued waiter", waiter).await.expect("join").expect("acquire");
        // Exactly this key is held: the base key of a longer one is still free.
        if !odd.is_empty() {
            let other = a.try_lock(&base).await.expect("try base").expect("base key aliased");
            other.release().await.expect("release base");
        }
        let t0 = Instant::now();
        g2.release().await.expect("release");
        releases.push(t0.elapsed());
        let again = a.try_lock(&k).await.expect("try").unwrap_or_else(|| panic!("{k:?} still held"));
        again.release().await.expect("release");
    }
    releases.sort();
    let median = releases[releases.len() / 2];
    assert!(median < Duration::from_millis(20), "release after a queued wait took {releases:?}");
}

/// Table names are identifiers only: injection attempts are refused before any SQL is sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_table_names_are_refused() {
    let url = shared_url();
    for bad in [
        "t`; DROP TABLE dlock_rows; --",
        "dlock_rows` (x INT); --",
        "a b",
        "db.t",
        "t'",
        "t\"",
        "t;",
        "t--",
        "",
        "1t",
        "tаble", // Cyrillic a
        &"t".repeat(59),
    ] {
        for mode in [Mode::Pessimistic, Mode::Optimistic] {
            let r = MySqlLock::builder().url(&url).mode(mode).table(bad).build().await;
            assert!(matches!(r, Err(LockError::InvalidConfig { .. })), "{mode:?} table {bad:?}: {r:?}");
        }
    }
    // A custom valid table works; the URL form carries mode and table too.
    let custom = MySqlLock::builder().url(format!("{url}?mode=optimistic&table=custom_leases")).build().await;
    let custom = custom.expect("custom table");
    assert_eq!((custom.mode(), custom.table()), (Mode::Optimistic, "custom_leases"));
    let l = Locker::new(Arc::new(custom));
    l.try_lock(key("custom")).await.expect("try").expect("free").release().await.expect("release");
}

/// Bad credentials are permanent; the password never shows in the error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_password_is_permanent_and_redacted() {
    let url = shared_url();
    let Some((head, tail)) = url.split_once('@') else { return };
    let Some((user, _pw)) = head.rsplit_once(':') else { return };
    let wrong = format!("{user}:wrong-secret-pw@{tail}");
    let err = MySqlLock::builder().url(&wrong).build().await.expect_err("bad password must fail");
    assert!(!err.is_temporary(), "auth failure must be permanent: {err:?}");
    let shown = format!("{err} {err:?}");
    assert!(!shown.contains("wrong-secret-pw"), "{shown}");
    // The message says what went wrong, in the server's words.
    assert!(err.to_string().contains("Access denied"), "{err}");
}

/// The seed's optimistic business update (as in `examples/flash_sale.rs`, with the table as a
/// parameter): wins only if the row is still at `expected_version`.
async fn decrement_stock_cas(
    pool: &MySqlPool,
    table: &str,
    id: i64,
    amount: i64,
    expected_version: i64,
) -> Result<bool, LockError> {
    validate_table_name(table)?;
    let sql =
        format!("UPDATE `{table}` SET stock = stock - ?, version = version + 1 WHERE id = ? AND version = ?");
    let res = lock_mysql::sqlx::query(lock_mysql::sqlx::AssertSqlSafe(sql))
        .bind(amount)
        .bind(id)
        .bind(expected_version)
        .execute(pool)
        .await
        .map_err(|e| LockError::permanent("mysql", e))?;
    Ok(res.rows_affected() == 1)
}

/// The seed's business CAS: a stale version loses, a fresh one wins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn business_cas_helper_refuses_stale_versions() {
    let pool = admin(&shared_url()).await;
    lock_mysql::sqlx::raw_sql(
        "CREATE TABLE IF NOT EXISTS seckill_good (id BIGINT PRIMARY KEY, stock BIGINT NOT NULL, version BIGINT NOT NULL); \
         REPLACE INTO seckill_good VALUES (1, 10, 0)",
    )
    .execute(&pool)
    .await
    .expect("setup");
    assert!(decrement_stock_cas(&pool, "seckill_good", 1, 1, 0).await.expect("cas"));
    assert!(!decrement_stock_cas(&pool, "seckill_good", 1, 1, 0).await.expect("stale cas"));
    assert!(decrement_stock_cas(&pool, "seckill_good", 1, 2, 1).await.expect("cas"));
    let (stock, version): (i64, i64) =
        lock_mysql::sqlx::query_as("SELECT stock, version FROM seckill_good WHERE id = 1")
            .fetch_one(&pool)
            .await
            .expect("read");
    assert_eq!((stock, version), (7, 2));
    assert!(matches!(
        decrement_stock_cas(&pool, "x`; --", 1, 1, 0).await,
        Err(LockError::InvalidConfig { .. })
    ));
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

/// Optimistic leases are judged by a zone-free clock: two clients whose sessions run in
/// different time zones (5 hours apart) agree on who holds the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn optimistic_leases_ignore_the_session_time_zone() {
    use lock_mysql::sqlx::mysql::MySqlConnectOptions;
    let url = shared_url();
    let client = |tz: &'static str| {
        let opts: MySqlConnectOptions =
            url.parse::<MySqlConnectOptions>().expect("url").timezone(Some(tz.to_owned()));
        async move {
            Locker::new(Arc::new(
                MySqlLock::builder()
                    .connect_options(opts)
                    .mode(Mode::Optimistic)
                    .build()
                    .await
                    .expect("build"),
            ))
        }
    };
    let (utc, east) = (client("+00:00").await, client("+05:00").await);
    let west = client("-07:00").await;
    let k = key("tz");
    let g = utc.lock(&k).lease(Duration::from_secs(5)).try_acquire().await.expect("try").expect("free");
    assert!(east.try_lock(&k).await.expect("try").is_none(), "a session 5 h east took a live lease");
    assert!(west.try_lock(&k).await.expect("try").is_none(), "a session 7 h west took a live lease");
    g.release().await.expect("release");
    let g = east.lock(&k).lease(Duration::from_secs(5)).try_acquire().await.expect("try").expect("free");
    assert!(
        utc.try_lock(&k).await.expect("try").is_none(),
        "a UTC session took a live lease of an eastern one"
    );
    g.release().await.expect("release");
}

/// MariaDB: the row of a released key is deleted, expired rows of crashed holders are swept,
/// and fences keep increasing for a key whose row came and went.
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
    let k = key("reclaim");
    let g = l.lock(&k).lease(Duration::from_secs(5)).try_acquire().await.expect("try").expect("free");
    let f1 = g.fence();
    assert_eq!(rows(k.clone()).await, 1);
    g.release().await.expect("release");
    assert_eq!(rows(k.clone()).await, 0, "a released key keeps its row");
    let g = l.lock(&k).lease(Duration::from_millis(50)).try_acquire().await.expect("try").expect("free");
    assert!(g.fence() > f1, "fence went back after the row was deleted");
    g.abandon(); // a crashed holder: its row stays until swept
    assert_eq!(rows(k.clone()).await, 1);
    // The sweep removes rows expired for a minute; age this one instead of waiting.
    lock_mysql::sqlx::query(lock_mysql::sqlx::AssertSqlSafe(format!(
        "UPDATE `{}` SET expires_at = UTC_TIMESTAMP(6) - INTERVAL 2 MINUTE WHERE name = ?",
        b.table()
    )))
    .bind(k.clone().into_bytes())
    .execute(&pool)
    .await
    .expect("age");
    // Every 1024th acquisition of a client sweeps in the background.
    for i in 0..1024 {
        let g = l.lock(format!("{k}-{i}")).lease(Duration::from_secs(5)).try_acquire().await.expect("try");
        g.expect("free").release().await.expect("release");
    }
    let t = Instant::now();
    while rows(k.clone()).await != 0 {
        assert!(t.elapsed() < Duration::from_secs(5), "the expired row was not swept");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
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

/// The grants the README gives for a least-privilege lock user: DML on the lock tables and
/// `NEXTVAL` on the sequence, nothing else (the schema made once by an administrator). Both
/// modes work with exactly that: acquire, wait, renew, nest, release, and the row sweep.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn least_privilege_user_runs_both_modes() {
    let srv = Arc::new(MariaDbServer::start().expect("start private mariadbd"));
    let (p_table, o_table) = ("lp_rows", "lp_leases");
    // The administrator makes the schema once.
    for (mode, table) in [(Mode::Pessimistic, p_table), (Mode::Optimistic, o_table)] {
        MySqlLock::builder()
            .url(srv.root_url())
            .mode(mode)
            .table(table)
            .build()
            .await
            .expect("schema as root");
    }
    let db = lock_testkit::server::MARIADB_DATABASE;
    let grants = format!(
        "CREATE USER 'lp'@'%' IDENTIFIED BY 'lp-s3cr3t'; \
         GRANT SELECT, INSERT, UPDATE, DELETE ON {db}.{p_table} TO 'lp'@'%'; \
         GRANT SELECT, INSERT ON {db}.{p_table}_fence TO 'lp'@'%'; \
         GRANT SELECT, INSERT, UPDATE ON {db}.{p_table}_notes TO 'lp'@'%'; \
         GRANT SELECT, INSERT, UPDATE, DELETE ON {db}.{o_table} TO 'lp'@'%'; \
         GRANT SELECT, INSERT ON {db}.{o_table}_fence TO 'lp'@'%'; \
         GRANT SELECT, INSERT, UPDATE ON {db}.{o_table}_notes TO 'lp'@'%';"
    );
    let s = srv.clone();
    tokio::task::spawn_blocking(move || s.exec_as_root(&grants)).await.expect("join").expect("grants");
    let url = format!("mysql://lp:lp-s3cr3t@127.0.0.1:{}/{db}", srv.port());
    for (mode, table) in [(Mode::Pessimistic, p_table), (Mode::Optimistic, o_table)] {
        let client = || async {
            Arc::new(
                MySqlLock::builder()
                    .url(&url)
                    .mode(mode)
                    .table(table)
                    .keepalive(KEEPALIVE)
                    .build()
                    .await
                    .expect("lp client"),
            )
        };
        let (ba, bb) = (client().await, client().await);
        let (a, b) = (Locker::new(ba.clone()), Locker::new(bb.clone()));
        let k = key("lp");
        let g = a.lock(&k).try_acquire().await.expect("acquire").expect("free");
        // Notes need SELECT, INSERT and UPDATE on `<table>_notes`.
        assert!(ba.set_note(&k, g.owner(), "lp leader").await.expect("note"));
        assert_eq!(bb.note(&k).await.expect("read note").as_deref(), Some("lp leader"));
        let inner = a.lock(&k).owner(g.owner()).try_acquire().await.expect("nest").expect("nested");
        g.renew(Duration::from_secs(30)).await.expect("renew");
        let k2 = k.clone();
        let waiter = tokio::spawn(async move { b.lock(&k2).wait(Duration::from_secs(10)).acquire().await });
        inner.release().await.expect("release nested");
        g.release().await.expect("release");
        waiter.await.expect("task").expect("the waiter acquires").release().await.expect("release");
    }
    // And nothing beyond: no other table.
    let pool = admin(&url).await;
    let denied = lock_mysql::sqlx::query("CREATE TABLE lp_other (x INT)").execute(&pool).await;
    assert!(denied.is_err(), "the lock user must not create tables");

    // Without the notes table (a schema made by an older version) the user still builds and
    // locks; a note is refused with a typed error and the hold goes on.
    let s = srv.clone();
    let drop_notes = format!("DROP TABLE {db}.{p_table}_notes");
    tokio::task::spawn_blocking(move || s.exec_as_root(&drop_notes)).await.expect("join").expect("drop");
    let b = Arc::new(
        MySqlLock::builder().url(&url).table(p_table).keepalive(KEEPALIVE).build().await.expect("lp build"),
    );
    let g = Locker::new(b.clone()).lock(key("lp-no-notes")).try_acquire().await.expect("try").expect("free");
    let e = b.set_note(g.key(), g.owner(), "n").await.expect_err("no notes table");
    // No such table (the user's grant outlived it), or no privilege: permanent either way.
    assert!(!e.is_temporary(), "{e:?}");
    g.renew(Duration::from_secs(30)).await.expect("the hold goes on");
    g.release().await.expect("release");
}

/// Polls `cond` until it holds or `limit` passes; returns how long it took.
async fn until<F: Future<Output = bool>>(
    limit: Duration,
    what: &str,
    mut cond: impl FnMut() -> F,
) -> Duration {
    let t = Instant::now();
    while !cond().await {
        assert!(t.elapsed() < limit, "{what}: not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    t.elapsed()
}

/// Asserts that `locker` is refused `key` on every attempt for `span`.
async fn refused_for(locker: &Locker, key: &str, span: Duration, what: &str) {
    let t = Instant::now();
    while t.elapsed() < span {
        if let Some(g) = locker.try_lock(key).await.expect("try") {
            let at = t.elapsed();
            g.release().await.expect("release");
            panic!("{what}: another client acquired after {at:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
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
    until(Duration::from_secs(10), "waiter queued in the server", || async {
        statements_like(&pool, &queued).await > 0
    })
    .await;
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

/// An optimistic table from before UTC leases (no `attempt` column, expiry written with NOW(6)
/// in the session's zone) is refused with a clear error, with or without schema creation; once
/// the old clients are stopped, `upgrade_table(true)` upgrades it in place: old leases freed,
/// fences keep increasing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn optimistic_table_of_an_older_version_is_refused_until_upgraded() {
    let url = shared_url();
    let pool = admin(&url).await;
    let table = format!("old_leases_{}", &OwnerToken::random().to_string()[..8]);
    lock_mysql::sqlx::raw_sql(lock_mysql::sqlx::AssertSqlSafe(format!(
        "CREATE TABLE `{table}` (name VARBINARY(255) NOT NULL PRIMARY KEY, owner BINARY(16) NULL, \
           version BIGINT UNSIGNED NOT NULL DEFAULT 0, holds INT UNSIGNED NOT NULL DEFAULT 0, \
           expires_at DATETIME(6) NULL) ENGINE=InnoDB; \
         CREATE SEQUENCE `{table}_fence` START WITH 100; \
         INSERT INTO `{table}` VALUES ('k', X'00000000000000000000000000000002', 99, 1, NOW(6) + INTERVAL 1 HOUR)"
    )))
    .execute(&pool)
    .await
    .expect("old table");
    let build = |create: bool, upgrade: bool| {
        MySqlLock::builder()
            .url(&url)
            .mode(Mode::Optimistic)
            .table(&table)
            .create_schema(create)
            .upgrade_table(upgrade)
            .build()
    };
    for create in [true, false] {
        match build(create, false).await {
            Err(LockError::InvalidConfig { reason }) => {
                assert!(reason.contains("upgrade_table") && reason.contains(&table), "{reason}")
            }
            other => panic!("old table accepted (create_schema {create}): {other:?}"),
        }
    }
    let l = Locker::new(Arc::new(build(true, true).await.expect("upgrade")));
    let g = l.try_lock("k").await.expect("try").expect("the old lease was freed");
    assert!(g.fence().expect("fence").0 > 99, "fence went back: {:?}", g.fence());
    g.release().await.expect("release");
    // Upgraded once: a plain build accepts it now.
    build(true, false).await.expect("build after the upgrade");
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
    until(Duration::from_secs(10), "second administrator queued", || async {
        statements_like(&pool, "SELECT 1 FROM%FOR UPDATE").await > 0
    })
    .await;
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

/// How many sessions wait in `GET_LOCK` on the server now.
async fn get_lock_waits(admin: &MySqlPool) -> i64 {
    statements_like(admin, "%GET_LOCK(%").await
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
