//! Hostile and wrong input: keys and table names, a bad password, the least-privileged user,
//! a table of an older version, the session's time zone, and the seed's business CAS (the flash
//! sale's stock update; the whole sale is `examples/mysql_flash_sale.rs`).

use super::*;
use lock_core::backend::Notes;

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
        until_running(&admin, &queued, &format!("{k:?}: waiter queued in the server")).await;
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

/// The seed's optimistic business update (as in `examples/mysql_flash_sale.rs`, with the table as a
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
    let db = lock_mysql_testing::MARIADB_DATABASE;
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
