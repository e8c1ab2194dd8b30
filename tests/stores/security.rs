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
use lock_mysql_testing::{MARIADB_DATABASE, MariaDbServer};
use lock_postgres_testing::{POSTGRES_DATABASE, PgServer};
use lock_redis_testing::RedisServer;
use lock_testkit::server::or_skip;
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
// The cases: TLS end to end, least privilege, no secrets
// ---------------------------------------------------------------------------------------------

#[cfg(feature = "tls")]
#[path = "security/tls.rs"]
mod tls;

#[path = "security/privilege.rs"]
mod privilege;

#[path = "security/leaks.rs"]
mod leaks;
