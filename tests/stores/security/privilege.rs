//! Least privilege: a Redis ACL user and a MariaDB user with only what the library needs run
//! every mode; nothing was denied meanwhile, and anything beyond is.

use super::*;

/// The ACL rule of a least-privilege lock user as the README gives it (after `ACL SETUSER
/// <name> reset on >password`), read from there so that the test and the README are one rule:
/// keys and channels under the default key prefix `dlock:`, the commands the library sends
/// (`EVALSHA`, `SCRIPT LOAD` when a script is not cached, `SUBSCRIBE`/`UNSUBSCRIBE` for
/// waiters) and those its scripts run. `AUTH` and `HELLO` need no permission.
fn redis_lock_user_acl() -> Vec<&'static str> {
    let readme = include_str!("../../../README.md");
    let line = readme.lines().find(|l| l.starts_with("ACL SETUSER locker")).expect("the README's rule");
    line.split_whitespace().skip_while(|w| !w.starts_with('>')).skip(1).collect()
}

/// Every mode with exactly [`redis_lock_user_acl`]: acquire, renew, a waiter woken by pub/sub,
/// nesting, the watchdog, inspect, release. No command was denied meanwhile (`ACL LOG` is
/// empty) and every command run is in the rule (`INFO commandstats`); the user is refused other
/// keys, other channels and other commands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_least_privilege_acl_user_runs_every_mode() {
    let logs = capture();
    let Some(srv) = or_skip("redis", RedisServer::start_with(&["--requirepass", "lp-admin-pw"])) else {
        return;
    };
    let mut adm = redis_admin(&srv.url()).await;
    let pw = "lpRedisPw4Kz";
    let mut rule = vec!["SETUSER", "locker", "reset", "on"];
    let pass = format!(">{pw}");
    rule.push(&pass);
    rule.extend(redis_lock_user_acl());
    let _: () = redis::cmd("ACL").arg(&rule[..]).query_async(&mut adm).await.expect("acl setuser");
    let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query_async(&mut adm).await.expect("resetstat");

    let url = format!("redis://locker:{pw}@127.0.0.1:{}/", srv.port());
    for mode in ["simple", "reentrant", "fair"] {
        let u = format!("{url}?mode={mode}");
        let (a, b) = least_privileged_lockers(&u, Duration::from_millis(600)).await;
        let k = format!("lp-{mode}");
        round_trip(&a, &b, &k).await;
        // The watchdog renews, inspect looks, and a nested hold (where there is one) works.
        let g = a.try_lock(&k).await.expect("try").expect("free");
        tokio::time::sleep(Duration::from_millis(700)).await;
        assert!(!g.is_lost(), "the watchdog kept the lease");
        let info = a.backend().inspect(&k).await.expect("inspect");
        eprintln!("{mode}: {info:?}");
        if mode != "simple" {
            let inner = a.lock(&k).owner(g.owner()).try_acquire().await.expect("try").expect("nested");
            inner.release().await.expect("release nested");
        }
        g.release().await.expect("release");
    }
    let log: Vec<redis::Value> = redis::cmd("ACL").arg("LOG").query_async(&mut adm).await.expect("acl log");
    assert!(log.is_empty(), "the library was denied something: {log:?}");
    let stats: String = redis::cmd("INFO").arg("commandstats").query_async(&mut adm).await.expect("info");
    let allowed: Vec<&str> = redis_lock_user_acl().into_iter().filter_map(|r| r.strip_prefix('+')).collect();
    let admin_only = ["config|resetstat", "acl|log", "info", "hello", "auth"];
    let mut used = Vec::new();
    for line in stats.lines() {
        let Some((name, rest)) = line.strip_prefix("cmdstat_").and_then(|l| l.split_once(':')) else {
            continue;
        };
        let calls = rest.split(',').find_map(|f| f.strip_prefix("calls=")).unwrap_or("0");
        if calls != "0" && !admin_only.contains(&name) {
            assert!(allowed.contains(&name), "{name} was run but is not in the rule ({line})");
            used.push(name.to_owned());
        }
    }
    let unused: Vec<&&str> = allowed.iter().filter(|a| !used.iter().any(|u| u == **a)).collect();
    eprintln!("commands run: {used:?}; allowed but not run here: {unused:?}");

    // Nothing beyond: other keys, other channels, other commands.
    let mut c = redis_admin(&url).await;
    let denied = |r: redis::RedisResult<redis::Value>, what: &str| {
        let e = r.expect_err(what);
        assert_eq!(e.code(), Some("NOPERM"), "{what}: {e}");
    };
    denied(redis::cmd("SET").arg("other:key").arg("1").query_async(&mut c).await, "a key outside the prefix");
    denied(
        redis::cmd("PUBLISH").arg("other").arg("1").query_async(&mut c).await,
        "a channel outside the prefix",
    );
    denied(redis::cmd("KEYS").arg("*").query_async(&mut c).await, "KEYS");
    denied(redis::cmd("FLUSHALL").query_async(&mut c).await, "FLUSHALL");
    denied(redis::cmd("CONFIG").arg("GET").arg("*").query_async(&mut c).await, "CONFIG");
    denied(redis::cmd("EVAL").arg("return 1").arg(0).query_async(&mut c).await, "EVAL of arbitrary Lua");
    let e = Locker::new(
        dlock::from_url(&format!("{url}?key_prefix=other:")).await.expect("connects (nothing checked yet)"),
    )
    .try_lock("k")
    .await
    .expect_err("a lock outside the prefix");
    assert!(matches!(e, LockError::PermissionDenied { .. }), "{}", chain(&e));
    assert_no_secret(&chain(&e), &[pw], "NOPERM error");
    assert_no_secret(&logs.text(), &[pw], "logs");
}

/// The grants of a least-privilege MariaDB lock user, once an administrator made the schema
/// (`MySqlLock::migrate` or the builder's default `create_schema` run as that administrator).
fn mysql_lock_user_grants(db: &str, user: &str) -> String {
    format!(
        "GRANT SELECT, INSERT ON `{db}`.`dlock_rows` TO {user}; \
         GRANT SELECT, INSERT ON `{db}`.`dlock_rows_fence` TO {user}; \
         GRANT SELECT ON `{db}`.`dlock_rows_notes` TO {user}; \
         GRANT SELECT, INSERT, UPDATE, DELETE ON `{db}`.`dlock_leases` TO {user}; \
         GRANT SELECT, INSERT ON `{db}`.`dlock_leases_fence` TO {user};"
    )
}

/// Both modes with exactly [`mysql_lock_user_grants`] (default tables): acquire, renew, a
/// waiter, nesting, the watchdog, inspect, release. The user can do nothing else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_least_privilege_user_runs_both_modes() {
    let logs = capture();
    let Some(srv) = or_skip("mariadb", MariaDbServer::start()) else { return };
    let srv = Arc::new(srv);
    for mode in ["pessimistic", "optimistic"] {
        dlock::from_url(&format!("{}?mode={mode}", srv.root_url())).await.expect("schema as root");
    }
    let pw = "lpMysqlPw9Rw";
    let sql = format!(
        "CREATE USER 'locker'@'%' IDENTIFIED BY '{pw}'; {}",
        mysql_lock_user_grants(MARIADB_DATABASE, "'locker'@'%'")
    );
    let s = srv.clone();
    tokio::task::spawn_blocking(move || s.exec_as_root(&sql)).await.expect("join").expect("grants");
    let url = format!("mysql://locker:{pw}@127.0.0.1:{}/{MARIADB_DATABASE}", srv.port());
    for mode in ["pessimistic", "optimistic"] {
        let u = format!("{url}?mode={mode}");
        let (a, b) = least_privileged_lockers(&u, Duration::from_millis(900)).await;
        let k = format!("lp-{mode}");
        round_trip(&a, &b, &k).await;
        let g = a.try_lock(&k).await.expect("try").expect("free");
        let inner = a.lock(&k).owner(g.owner()).try_acquire().await.expect("try").expect("nested");
        tokio::time::sleep(Duration::from_millis(1000)).await;
        assert!(!g.is_lost(), "the watchdog kept the lease");
        match a.backend().inspect(&k).await {
            Ok(info) => eprintln!("{mode}: {info:?}"),
            Err(LockError::Unsupported { .. }) => {}
            Err(e) => panic!("inspect: {}", chain(&e)),
        }
        inner.release().await.expect("release nested");
        g.release().await.expect("release");
    }
    // Nothing beyond.
    let pool = lock_mysql::sqlx::mysql::MySqlPoolOptions::new()
        .max_connections(1)
        .connect(&url)
        .await
        .expect("pool");
    for sql in [
        "CREATE TABLE lp_other (x INT)",
        "DROP TABLE dlock_rows",
        "TRUNCATE TABLE dlock_leases",
        "SELECT * FROM mysql.user",
        "ALTER SEQUENCE dlock_rows_fence RESTART 1",
    ] {
        let denied = lock_mysql::sqlx::query(sql).execute(&pool).await;
        assert!(denied.is_err(), "the lock user must not run {sql}");
    }
    pool.close().await;
    assert_no_secret(&logs.text(), &[pw], "logs");
}
