//! No secrets in errors, `Debug` output or logs: every URL scheme, failures of every kind and
//! successful round trips, with passwords containing `/ ? # @ %`.

use super::*;

/// Connects (bounded), records `Debug` of the backend or the whole error chain, and returns it.
async fn attempt(url: &str, seen: &mut Vec<String>) -> Result<dlock::DynBackend, LockError> {
    let r = within(Duration::from_secs(30), &dlock::redact_url(url), dlock::from_url(url)).await;
    match &r {
        Ok(b) => seen.push(format!("{b:?} {}", b.identity())),
        Err(e) => seen.push(chain(e)),
    }
    r
}

/// Checks everything seen and every log line so far for every form of the passwords.
fn assert_nothing_leaked(seen: &[String], passwords: &[&str], what: &str) {
    assert_no_secret(&seen.join("\n"), passwords, &format!("{what}: errors and Debug"));
    assert_no_secret(&capture().text(), passwords, &format!("{what}: logs"));
}

/// `redis://`: the right password (a watched round trip, logged at TRACE), a wrong one, an
/// unknown ACL user, a refused port, an unreachable and an unresolvable host, a database out of
/// range, a malformed port, and `rediss://` to a plaintext server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_secret_leaks_from_redis() {
    let logs = capture();
    let (right, wrong) = (nasty_password("RdOkA1"), nasty_password("RdNoB2"));
    let Some(srv) = or_skip("redis", RedisServer::start_with(&["--requirepass", &right])) else { return };
    let p = srv.port();
    let (r, w) = (enc(&right), enc(&wrong));
    let mut seen = Vec::new();

    let ok = format!("redis://:{r}@127.0.0.1:{p}/?mode=reentrant");
    let b = attempt(&ok, &mut seen).await.expect("right password");
    let l = Locker::new(b).with_watchdog_lease(Duration::from_millis(300)).expect("lease");
    let g = l.lock("secrets").wait(Duration::from_secs(2)).acquire().await.expect("acquire");
    tokio::time::sleep(Duration::from_millis(250)).await; // renewals, logged at TRACE
    seen.push(format!("{g:?} {l:?}"));
    g.release().await.expect("release");
    assert!(logs.text().contains("lock acquired"), "TRACE events are not captured");

    let cases = [
        (format!("redis://:{w}@127.0.0.1:{p}/"), "wrong password"),
        (format!("redis://nosuchuser:{w}@127.0.0.1:{p}/"), "unknown ACL user"),
        (format!("redis://:{r}@127.0.0.1:1/"), "refused port"),
        (format!("redis://:{r}@192.0.2.1:6379/"), "unreachable host"),
        (format!("redis://:{r}@nosuchhost.invalid:6379/"), "unresolvable host"),
        (format!("redis://:{r}@127.0.0.1:{p}/99"), "database out of range"),
        (format!("redis://:{r}@127.0.0.1:notaport/"), "malformed port"),
        (format!("rediss://:{r}@127.0.0.1:{p}/"), "TLS to a plaintext server"),
    ];
    for (url, what) in &cases {
        let e = attempt(url, &mut seen).await.map(drop).expect_err(what);
        eprintln!("redis, {what}: {e}");
        if *what == "wrong password" || *what == "unknown ACL user" {
            assert!(matches!(e, LockError::PermissionDenied { .. }), "{what}: {}", chain(&e));
        }
        seen.push(format!("{:?}", RedisLock::builder().url(url.as_str())));
        seen.push(dlock::redact_url(url));
    }
    seen.push(format!("{:?}", RedisLock::builder().url(&ok).credentials(Some("u"), &wrong)));
    // A guard's Debug, a failing call on a live backend.
    let b = attempt(&format!("redis://:{r}@127.0.0.1:{p}/"), &mut seen).await.expect("right password");
    srv.kill().expect("kill");
    if let Err(e) = Locker::new(b).try_lock("after-kill").await {
        seen.push(chain(&e));
    }
    assert_nothing_leaked(&seen, &[&right, &wrong], "redis");
}

/// `redlock://`: three masters with the right password, then a wrong one, masters that refuse,
/// and a malformed list.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_secret_leaks_from_redlock() {
    capture();
    let (right, wrong) = (nasty_password("RlOkC3"), nasty_password("RlNoD4"));
    let mut masters = Vec::new();
    for _ in 0..3 {
        let Some(s) = or_skip("redis", RedisServer::start_with(&["--requirepass", &right])) else { return };
        masters.push(s);
    }
    let hosts: Vec<String> = masters.iter().map(|m| format!("127.0.0.1:{}", m.port())).collect();
    let hosts = hosts.join(",");
    let (r, w) = (enc(&right), enc(&wrong));
    let mut seen = Vec::new();
    let ok = format!("redlock://:{r}@{hosts}/?mode=simple");
    let l = Locker::new(attempt(&ok, &mut seen).await.expect("right password"));
    l.try_lock("secrets").await.expect("try").expect("free").release().await.expect("release");
    for (url, what) in [
        (format!("redlock://:{w}@{hosts}/"), "wrong password"),
        (format!("redlock://:{r}@127.0.0.1:1,127.0.0.1:2,127.0.0.1:3/"), "every master refuses"),
        (format!("redlock://:{r}@{hosts}/?mode=fair"), "fair mode"),
    ] {
        let e = attempt(&url, &mut seen).await.map(drop).expect_err(what);
        eprintln!("redlock, {what}: {e}");
        seen.push(dlock::redact_url(&url));
    }
    // One master down after start: its errors are logged as warnings.
    masters[0].kill().expect("kill");
    l.try_lock("secrets-2").await.expect("2 of 3").expect("free").release().await.expect("release");
    assert_nothing_leaked(&seen, &[&right, &wrong], "redlock");
}

/// `mysql://` and `mariadb://`: the right password (both modes, logged), a wrong one, a
/// database the user may not use, a refused port, an unreachable host, and TLS failures
/// (`ssl-mode=required` against a server without TLS, a CA file that does not exist).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_secret_leaks_from_mysql() {
    capture();
    let (right, wrong) = (nasty_password("MyOkE5"), nasty_password("MyNoF6"));
    let Some(srv) = or_skip("mariadb", MariaDbServer::start()) else { return };
    let srv = Arc::new(srv);
    let sql = format!(
        "CREATE USER 'sec'@'%' IDENTIFIED BY '{right}'; GRANT ALL ON `{MARIADB_DATABASE}`.* TO 'sec'@'%';"
    );
    let s = srv.clone();
    tokio::task::spawn_blocking(move || s.exec_as_root(&sql)).await.expect("join").expect("user");
    let (p, r, w, db) = (srv.port(), enc(&right), enc(&wrong), MARIADB_DATABASE);
    let mut seen = Vec::new();
    for mode in ["pessimistic", "optimistic"] {
        let ok = format!("mysql://sec:{r}@127.0.0.1:{p}/{db}?mode={mode}");
        let l = Locker::new(attempt(&ok, &mut seen).await.expect("right password"));
        let g = l.try_lock("secrets").await.expect("try").expect("free");
        seen.push(format!("{g:?}"));
        g.release().await.expect("release");
        seen.push(format!("{:?}", MySqlLock::builder().url(&ok)));
    }
    let cases = [
        (format!("mysql://sec:{w}@127.0.0.1:{p}/{db}"), "wrong password"),
        (format!("mariadb://sec:{w}@127.0.0.1:{p}/{db}"), "wrong password (mariadb://)"),
        (format!("mysql://sec:{r}@127.0.0.1:{p}/nosuchdb"), "bad database"),
        (format!("mysql://sec:{r}@127.0.0.1:1/{db}"), "refused port"),
        (format!("mysql://sec:{r}@192.0.2.1:3306/{db}"), "unreachable host"),
        (format!("mysql://sec:{r}@127.0.0.1:{p}/{db}?ssl-mode=required"), "TLS required, server has none"),
        (
            format!("mysql://sec:{r}@127.0.0.1:{p}/{db}?ssl-mode=verify_identity&ssl-ca=/nonexistent/ca.pem"),
            "missing CA file",
        ),
        (format!("mysql://sec:{r}@127.0.0.1:{p}/{db}?mode=bogus"), "bad mode"),
    ];
    for (url, what) in &cases {
        let e = attempt(url, &mut seen).await.map(drop).expect_err(what);
        eprintln!("mysql, {what}: {e}");
        if what.starts_with("wrong password") || *what == "bad database" {
            assert!(matches!(e, LockError::PermissionDenied { .. }), "{what}: {}", chain(&e));
        }
        seen.push(format!("{:?}", MySqlLock::builder().url(url.as_str())));
        seen.push(dlock::redact_url(url));
    }
    assert_nothing_leaked(&seen, &[&right, &wrong], "mysql");
}

/// `postgres://` and `postgresql://`: the right password (SCRAM, a held lock, logged), a wrong
/// one, a database that does not exist, a refused port, an unreachable host, TLS asked of a
/// server without it, an unknown option.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_secret_leaks_from_postgres() {
    capture();
    let (right, wrong) = (nasty_password("PgOkG7"), nasty_password("PgNoH8"));
    let Some(srv) = or_skip("postgres", PgServer::start()) else { return };
    let srv = Arc::new(srv);
    let stmts =
        [format!("CREATE ROLE sec LOGIN PASSWORD '{right}'"), "GRANT CREATE ON SCHEMA public TO sec".into()];
    let s = srv.clone();
    tokio::task::spawn_blocking(move || s.exec_as_admin(&[&stmts[0], &stmts[1]]))
        .await
        .expect("join")
        .expect("role");
    let (p, r, w, db) = (srv.port(), enc(&right), enc(&wrong), POSTGRES_DATABASE);
    let mut seen = Vec::new();
    let ok = format!("postgres://sec:{r}@127.0.0.1:{p}/{db}");
    let l = Locker::new(attempt(&ok, &mut seen).await.expect("right password"));
    let g = l.try_lock("secrets").await.expect("try").expect("free");
    seen.push(format!("{g:?}"));
    g.release().await.expect("release");
    seen.push(format!("{:?}", dlock::lock_postgres::PgLock::builder().url(&ok)));
    let cases = [
        (format!("postgres://sec:{w}@127.0.0.1:{p}/{db}"), "wrong password"),
        (format!("postgresql://sec:{w}@127.0.0.1:{p}/{db}"), "wrong password (postgresql://)"),
        (format!("postgres://sec:{r}@127.0.0.1:{p}/nosuchdb"), "bad database"),
        (format!("postgres://sec:{r}@127.0.0.1:1/{db}"), "refused port"),
        (format!("postgres://sec:{r}@192.0.2.1:5432/{db}"), "unreachable host"),
        (format!("postgres://sec:{r}@127.0.0.1:{p}/{db}?sslmode=require"), "TLS required, server has none"),
        (format!("postgres://sec:{r}@127.0.0.1:{p}/{db}?mode=bogus"), "unknown option"),
    ];
    for (url, what) in &cases {
        let e = attempt(url, &mut seen).await.map(drop).expect_err(what);
        eprintln!("postgres, {what}: {e}");
        if what.starts_with("wrong password") {
            assert!(matches!(e, LockError::PermissionDenied { .. }), "{what}: {}", chain(&e));
        }
        seen.push(format!("{:?}", dlock::lock_postgres::PgLock::builder().url(url.as_str())));
        seen.push(dlock::redact_url(url));
    }
    assert_nothing_leaked(&seen, &[&right, &wrong], "postgres");
}

/// `zk://` with digest credentials: a round trip with the right ones (logged), a node guarded
/// by them refused to the wrong ones, a missing chroot, and nothing listening.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_secret_leaks_from_zk() {
    capture();
    let (right, wrong) = (nasty_password("ZkOkG7"), nasty_password("ZkNoH8"));
    let (r, w) = (enc(&right), enc(&wrong));
    let mut seen = Vec::new();
    let down = format!("zk://app:{r}@127.0.0.1:1/locks?connection_timeout_ms=500");
    let e = attempt(&down, &mut seen).await.map(drop).expect_err("nothing listening");
    eprintln!("zk, nothing listening: {e}");
    seen.push(format!("{:?}", dlock::lock_zk::ZkLock::builder().url(&down)));

    if let Some(zk) = or_skip("zookeeper", lock_zk_testing::ZkServer::start()) {
        let base = format!("127.0.0.1:{}", zk.port());
        let ok = format!("zk://app:{r}@{base}/secured?create_chroot=true");
        let a = Locker::new(attempt(&ok, &mut seen).await.expect("right credentials"));
        let g = a.try_lock("secrets").await.expect("try").expect("free");
        let intruder = format!("zk://app:{w}@{base}/secured");
        match attempt(&intruder, &mut seen).await {
            Ok(b) => match Locker::new(b).try_lock("secrets").await {
                Ok(Some(_)) => panic!("the wrong digest password took a lock guarded by the right one"),
                Ok(None) => {}
                Err(e) => seen.push(chain(&e)),
            },
            Err(e) => seen.push(chain(&e)),
        }
        g.release().await.expect("release");
        let e = attempt(&format!("zk://app:{r}@{base}/locks?chroot=/missing"), &mut seen)
            .await
            .map(drop)
            .expect_err("missing chroot");
        eprintln!("zk, missing chroot: {e}");
    }
    assert_nothing_leaked(&seen, &[&right, &wrong], "zk");
}

/// A URL with credentials but no host (`scheme://:PW@/`): the configuration error must not
/// quote the password, and neither may `redact_url`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_secret_leaks_from_urls_without_a_host() {
    let logs = capture();
    let mut leaks = Vec::new();
    for (scheme, tag) in [
        ("redlock", "NoHostRl"),
        ("redis", "NoHostRd"),
        ("mysql", "NoHostMy"),
        ("zk", "NoHostZk"),
        ("postgres", "NoHostPg"),
    ] {
        let pw = nasty_password(tag);
        let url = format!("{scheme}://u:{}@/", enc(&pw));
        let mut seen = Vec::new();
        let _ = attempt(&url, &mut seen).await.map(drop);
        seen.push(format!("redact_url: {}", dlock::redact_url(&url)));
        let text = format!("{}\n{}", seen.join("\n"), logs.text());
        if let Some(leak) = find_leak(&text, &[&pw]) {
            leaks.push(format!("{scheme}: {leak}"));
        }
    }
    assert!(leaks.is_empty(), "{}", leaks.join("\n\n"));
}

/// Users write passwords into URLs raw as often as percent-encoded: a raw `/ ? # @ %` must not
/// make a fragment of the password show up in an error, `Debug` or log either.
async fn raw_password_case(scheme_url: impl Fn(&str) -> String, tag: &str) {
    capture();
    let raw = nasty_password(tag);
    let url = scheme_url(&raw);
    let mut seen = Vec::new();
    let _ = attempt(&url, &mut seen).await.map(drop);
    seen.push(dlock::redact_url(&url));
    seen.push(format!("{:?}", RedisLock::builder().url(url.as_str())));
    seen.push(format!("{:?}", MySqlLock::builder().url(url.as_str())));
    seen.push(format!("{:?}", dlock::lock_zk::ZkLock::builder().url(url.as_str())));
    seen.push(format!("{:?}", dlock::lock_postgres::PgLock::builder().url(url.as_str())));
    assert_nothing_leaked(&seen, &[&raw], &format!("raw password in {}", dlock::redact_url(&url)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_secret_leaks_from_raw_password_in_redis_url() {
    raw_password_case(|pw| format!("redis://user:{pw}@127.0.0.1:1/0"), "RawRedis1").await;
    raw_password_case(|pw| format!("redis://:{pw}@127.0.0.1:1/"), "RawRedis2").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_secret_leaks_from_raw_password_in_redlock_url() {
    raw_password_case(|pw| format!("redlock://:{pw}@127.0.0.1:1,127.0.0.1:2,127.0.0.1:3/"), "RawRedlock")
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_secret_leaks_from_raw_password_in_mysql_url() {
    raw_password_case(|pw| format!("mysql://u:{pw}@127.0.0.1:1/db"), "RawMysql").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_secret_leaks_from_raw_password_in_postgres_url() {
    raw_password_case(|pw| format!("postgres://u:{pw}@127.0.0.1:1/db"), "RawPg1").await;
    raw_password_case(|pw| format!("postgresql://u:{pw}@127.0.0.1:1/db?table=t"), "RawPg2").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_secret_leaks_from_raw_password_in_zk_url() {
    raw_password_case(|pw| format!("zk://u:{pw}@127.0.0.1:1/locks?connection_timeout_ms=500"), "RawZk").await;
}

/// `etcd://` with user authentication: a round trip with the right password (logged), a wrong
/// one, a refused port.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_secret_leaks_from_etcd() {
    capture();
    let (right, wrong) = (nasty_password("EtOkJ9"), nasty_password("EtNoK0"));
    let Some(srv) = or_skip("etcd", lock_etcd_testing::EtcdServer::start()) else { return };
    let (user_pw, root_pw) = (format!("--new-user-password={right}"), format!("--new-user-password={wrong}"));
    for cmd in [
        &["user", "add", "root", "--interactive=false", root_pw.as_str()][..],
        &["role", "add", "dlock"],
        &["role", "grant-permission", "dlock", "--prefix=true", "readwrite", "/app/"],
        &["user", "add", "app", "--interactive=false", user_pw.as_str()],
        &["user", "grant-role", "app", "dlock"],
        &["auth", "enable"],
    ] {
        srv.etcdctl(cmd).unwrap_or_else(|e| panic!("etcdctl {}: {e}", cmd[..2].join(" ")));
    }
    let (p, r, w) = (srv.port(), enc(&right), enc(&wrong));
    let mut seen = Vec::new();
    let ok = format!("etcd://app:{r}@127.0.0.1:{p}/app?lease_ttl=1s");
    let l = Locker::new(attempt(&ok, &mut seen).await.expect("right password"));
    let g = l.try_lock("secrets").await.expect("try").expect("free");
    seen.push(format!("{g:?} {l:?}"));
    g.release().await.expect("release");
    seen.push(format!("{:?}", dlock::lock_etcd::EtcdLock::builder().url(&ok)));
    let cases = [
        (format!("etcd://app:{w}@127.0.0.1:{p}/app"), "wrong password"),
        (format!("etcd://app:{r}@127.0.0.1:1/app?connect_timeout=500ms"), "refused port"),
    ];
    for (url, what) in &cases {
        let e = attempt(url, &mut seen).await.map(drop).expect_err(what);
        eprintln!("etcd, {what}: {e}");
        if *what == "wrong password" {
            assert!(matches!(e, LockError::PermissionDenied { .. }), "{what}: {}", chain(&e));
        }
        seen.push(format!("{:?}", dlock::lock_etcd::EtcdLock::builder().url(url.as_str())));
        seen.push(dlock::redact_url(url));
    }
    assert_nothing_leaked(&seen, &[&right, &wrong], "etcd");
}
