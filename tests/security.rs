//! Security, proved against servers started here:
//!
//! * **TLS end to end** (feature `tls`): a throwaway CA signs a certificate for 127.0.0.1; Redis
//!   listens with `--tls-port` and no plaintext port, MariaDB with `ssl-cert` and
//!   `require_secure_transport=ON`. Lock round trips (acquire, second client refused, a waiter
//!   woken by notification, renew, release) work with that CA trusted, through the builders and
//!   `dlock::from_url`; a client trusting another CA, and a plaintext client, are refused with an
//!   error that names the problem, in bounded time, without the password.
//! * **Least privilege**: a Redis ACL user confined to the key prefix, its channels and exactly
//!   the commands the library and its scripts send, and a MariaDB user with DML on the lock
//!   tables and `NEXTVAL` on the sequences, run every mode; nothing was denied meanwhile, and
//!   anything beyond is.
//! * **No secrets**: failures of every kind (wrong password, unreachable host, refused port, bad
//!   database, TLS failure) and successful round trips for `redis://`, `rediss://`,
//!   `redlock://`, `mysql://`, `zk://` and `etcd://`, with passwords containing `/ ? # @ %`; the password
//!   appears in no `Display`, no `Debug` of an error, builder or backend, and in no `tracing`
//!   event or `log` record down to TRACE.

use std::io::Write;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use dlock::lock_mysql::{self, MySqlLock};
use dlock::lock_redis::{RedisLock, redis};
use dlock::{LockError, Locker};
use lock_core::backend::Mutex;
use lock_testkit::server::{
    MARIADB_DATABASE, MariaDbServer, POSTGRES_DATABASE, PgServer, RedisServer, or_skip,
};
use lock_testkit::within;

// ---------------------------------------------------------------------------------------------
// Shared helpers
// ---------------------------------------------------------------------------------------------

/// `Display` and `Debug` of the error and of every source in its chain.
fn chain(e: &LockError) -> String {
    let mut s = format!("{e} | {e:?}");
    let mut src = std::error::Error::source(e);
    while let Some(x) = src {
        s.push_str(&format!(" | {x} | {x:?}"));
        src = x.source();
    }
    s
}

/// Everything the process logged, through `tracing` (every level, span fields included) and
/// through `log` (redis, sqlx and rustls use it), since the first [`capture`].
#[derive(Clone, Default)]
struct Sink(Arc<Mutex<Vec<u8>>>);

impl Sink {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock()).into_owned()
    }
}

impl Write for Sink {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl log::Log for Sink {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }
    fn log(&self, r: &log::Record<'_>) {
        let line = format!("log {} {}: {}\n", r.level(), r.target(), r.args());
        self.0.lock().extend_from_slice(line.as_bytes());
    }
    fn flush(&self) {}
}

/// Installs the process-wide TRACE capture once; every test calls it first, so the whole binary
/// is recorded.
fn capture() -> &'static Sink {
    static SINK: OnceLock<Sink> = OnceLock::new();
    SINK.get_or_init(|| {
        let sink = Sink::default();
        let w = sink.clone();
        tracing_subscriber::fmt()
            .with_writer(move || w.clone())
            .with_max_level(tracing_subscriber::filter::LevelFilter::TRACE)
            .with_ansi(false)
            .init();
        log::set_boxed_logger(Box::new(sink.clone())).expect("the only `log` logger");
        log::set_max_level(log::LevelFilter::Trace);
        log::trace!(target: "security", "log capture on");
        tracing::trace!(target: "security", "tracing capture on");
        let text = sink.text();
        assert!(
            text.contains("log TRACE security: log capture on"),
            "`log` records are not captured: {text}"
        );
        assert!(text.contains("tracing capture on"), "`tracing` events are not captured: {text}");
        sink
    })
}

/// A password with every URL-special character (`/ ? # @ %`) between distinctive 6-character
/// pieces, so even a fragment cut at one of them is recognised.
fn nasty_password(tag: &str) -> String {
    format!("{tag}/vK9qTe?mW4zXa#pL7nRu@hB2cYo%jD5sLi")
}

/// `s` with everything but `A-Z a-z 0-9 - . _ ~` percent-encoded, as a URL's userinfo needs.
fn enc(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Every form of `password` whose presence in output would be a leak: raw, percent-encoded
/// (upper and lower case) and each piece between the special characters.
fn leak_forms(password: &str) -> Vec<String> {
    let mut forms = vec![password.to_owned(), enc(password), enc(password).to_ascii_lowercase()];
    forms.extend(password.split(['/', '?', '#', '@', '%']).filter(|p| p.len() >= 4).map(str::to_owned));
    forms
}

/// The first form of any of `passwords` found in `text`, with 300 characters around it.
fn find_leak(text: &str, passwords: &[&str]) -> Option<String> {
    for pw in passwords {
        for form in leak_forms(pw) {
            if let Some(at) = text.find(&form) {
                let from = text[..at].char_indices().rev().nth(300).map_or(0, |(i, _)| i);
                let to = text[at..].char_indices().nth(300).map_or(text.len(), |(i, _)| at + i);
                return Some(format!("{form:?} leaked here:\n…{}…", &text[from..to]));
            }
        }
    }
    None
}

/// Panics naming the form and the context if any form of any of `passwords` is in `text`.
fn assert_no_secret(text: &str, passwords: &[&str], what: &str) {
    if let Some(leak) = find_leak(text, passwords) {
        panic!("{what}: {leak}");
    }
}

/// The error `fut` must end with, within `limit` (nothing here may hang); `what` names what
/// must be refused.
async fn refusal<T>(
    what: &str,
    limit: Duration,
    fut: impl Future<Output = Result<T, LockError>>,
) -> LockError {
    match within(limit, what, fut).await {
        Ok(_) => panic!("{what}: not refused"),
        Err(e) => e,
    }
}

/// Acquire, a second client refused, renew, a waiter of the second client woken when the first
/// releases, release.
async fn round_trip(a: &Locker, b: &Locker, key: &str) {
    let g = a.lock(key).wait(Duration::from_secs(5)).acquire().await.expect("acquire");
    assert!(b.try_lock(key).await.expect("try").is_none(), "a second client must be refused");
    g.renew(Duration::from_secs(30)).await.expect("renew");
    let (b2, k) = (b.clone(), key.to_owned());
    let waiter = tokio::spawn(async move { b2.lock(&k).wait(Duration::from_secs(10)).acquire().await });
    tokio::time::sleep(Duration::from_millis(150)).await; // let it queue and subscribe
    let released = Instant::now();
    g.release().await.expect("release");
    let g2 = waiter.await.expect("task").expect("the waiter acquires after the release");
    assert!(released.elapsed() < Duration::from_secs(3), "waiter woke late: {:?}", released.elapsed());
    g2.release().await.expect("release");
}

/// Two clients of the least-privileged user at `url`, the first renewed by its watchdog.
async fn least_privileged_lockers(url: &str, watchdog_lease: Duration) -> (Locker, Locker) {
    let a = Locker::new(dlock::from_url(url).await.expect("lock user connects"));
    let b = Locker::new(dlock::from_url(url).await.expect("lock user connects"));
    (a.with_watchdog_lease(watchdog_lease).expect("lease"), b)
}

async fn redis_admin(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url).expect("url").get_multiplexed_async_connection().await.expect("admin connection")
}

// ---------------------------------------------------------------------------------------------
// TLS end to end
// ---------------------------------------------------------------------------------------------

#[cfg(feature = "tls")]
#[path = "security/tls.rs"]
mod tls;

// ---------------------------------------------------------------------------------------------
// Least privilege
// ---------------------------------------------------------------------------------------------

/// The ACL rule of a least-privilege lock user (after `ACL SETUSER <name> reset on >password`):
/// keys and channels under the default key prefix `dlock:`, and only the commands the library
/// sends (`EVALSHA`, `SCRIPT LOAD` when a script is not cached, `SUBSCRIBE`/`UNSUBSCRIBE` for
/// waiters) and those its scripts run. `AUTH` and `HELLO` need no permission.
const REDIS_LOCK_USER_ACL: &str = "resetkeys resetchannels ~dlock:* &dlock:* -@all \
     +evalsha +script|load +subscribe +unsubscribe \
     +get +set +del +exists +type +pexpire +pttl +incr +time \
     +hget +hset +hexists +hincrby +hdel +hkeys \
     +lindex +llen +lpop +rpush +lrem +zadd +zscore +zrem +publish";

/// Every mode with exactly [`REDIS_LOCK_USER_ACL`]: acquire, renew, a waiter woken by pub/sub,
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
    rule.extend(REDIS_LOCK_USER_ACL.split_whitespace());
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
    let allowed: Vec<&str> =
        REDIS_LOCK_USER_ACL.split_whitespace().filter_map(|r| r.strip_prefix('+')).collect();
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

// ---------------------------------------------------------------------------------------------
// No secrets in errors, Debug output or logs
// ---------------------------------------------------------------------------------------------

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

    if let Some(zk) = or_skip("zookeeper", lock_testkit::server::ZkServer::start()) {
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
    let Some(srv) = or_skip("etcd", lock_testkit::server::EtcdServer::start()) else { return };
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
