//! Sharing a lock with Python, against the real libraries: redis-py 8.1's `redis.lock.Lock`
//! ([`Mode::RedisPy`]) and python-redis-lock 4.0.1's `redis_lock.Lock`
//! ([`Mode::PythonRedisLock`]), from the pinned virtualenv of `lock_testkit::interop::python`,
//! driven by `tests/interop/peer.py` over stdin/stdout. Every "the other side holds" is an
//! answer the peer printed after its library returned; waits are on answers, the server's
//! state or our client's attempt counter, never sleeps.

use std::sync::Arc;
use std::time::Duration;

use lock_core::backend::LockBackend;
use lock_core::{Locker, OwnerToken};
use lock_redis::redis::{self, AsyncCommands, aio::MultiplexedConnection};
use lock_redis::{Mode, RedisLock};
use lock_redis_testing::{RedisServer, try_shared_redis};
use lock_testkit::interop::{Peer, python};
use lock_testkit::server::or_skip;
use lock_testkit::{eventually, within};
use tokio::process::Command;
use tokio::time::Instant;

/// How long the Python peer may take to answer (its start imports redis and redis_lock).
const ANSWER: Duration = Duration::from_secs(30);
/// A lease no test outlives: a lock that frees sooner was released, not expired.
const LONG: Duration = Duration::from_secs(30);
/// Longest acceptable hand-over from a Python release to our waiter: the waiter polls every
/// `DEFAULT_INTEROP_POLL` (50 ms), far below the 30 s lease it would otherwise wait out; the
/// rest is slack for a loaded two-core machine.
const HANDOVER_BOUND: Duration = Duration::from_secs(2);

/// The URL of `LOCK_TEST_REDIS_URL`, else of the shared server, or `None` after `SKIPPED` (a
/// missing server fails under `LOCK_TEST_REQUIRE=1`).
fn server() -> Option<String> {
    match lock_redis_testing::external_url() {
        Some(url) => Some(url),
        None => or_skip("redis-server", try_shared_redis()).map(RedisServer::url),
    }
}

/// A Python peer connected to `url`, or `None` after `SKIPPED` when the venv cannot be made.
async fn peer(url: &str) -> Option<Peer> {
    let python = python()?;
    let mut cmd = Command::new(python);
    cmd.arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/redis/interop/peer.py")).arg(url);
    let mut p = Peer::spawn("python", cmd);
    p.expect("ready", ANSWER).await;
    Some(p)
}

/// A random namespace per test run, the same on both sides.
fn prefix() -> String {
    format!("it-{}:", &OwnerToken::random().to_string()[..12])
}

async fn backend(url: &str, mode: Mode, prefix: &str) -> RedisLock {
    RedisLock::builder().url(url).mode(mode).key_prefix(prefix).build().await.expect("backend")
}

async fn admin(url: &str) -> MultiplexedConnection {
    redis::Client::open(url).expect("url").get_multiplexed_async_connection().await.expect("admin")
}

/// The Python library's name for `mode` (the peer's `new` argument).
fn kind(mode: Mode) -> &'static str {
    if mode == Mode::RedisPy { "redis-py" } else { "prl" }
}

/// Rounds of hand-over from a Python release to our waiter, for the figures printed.
const ROUNDS: usize = 10;

/// The other side holds: we are refused; it releases: our waiter, already waiting, gets the
/// lock within the poll interval (min / median / max over the rounds printed), with a fencing
/// token; while we hold, the other side is refused.
async fn their_release_lets_our_waiter_in(mode: Mode) {
    let Some(url) = server() else { return };
    let Some(mut py) = peer(&url).await else { return };
    let p = prefix();
    let ours = backend(&url, mode, &p).await;
    let locker = Locker::new(Arc::new(ours.clone()));
    py.call(&format!("new a {} {p}job {}", kind(mode), LONG.as_millis()), "new a", ANSWER).await;
    let mut took = Vec::with_capacity(ROUNDS);
    for _ in 0..ROUNDS {
        assert_eq!(py.call("try a", "try a", ANSWER).await, "try a 1", "{mode}: python takes a free lock");
        assert!(
            locker.lock("job").try_acquire().await.expect("try").is_none(),
            "{mode}: python's hold excludes us"
        );
        let before = ours.attempts();
        let l = locker.clone();
        let waiter = tokio::spawn(async move { l.lock("job").wait(LONG).acquire().await });
        // Two attempts: the first, and the one after subscribing (our own releases wake it).
        eventually(ANSWER, "our waiter waits", || {
            let n = ours.attempts();
            async move { n >= before + 2 }
        })
        .await;
        let released = Instant::now();
        assert_eq!(py.call("release a", "release a", ANSWER).await, "release a ok");
        let g = within(HANDOVER_BOUND, "our waiter gets the lock python released", waiter)
            .await
            .expect("task")
            .expect("acquired");
        took.push(released.elapsed());
        assert!(g.fence().is_some(), "{mode}: our grants keep their fencing token");
        assert_eq!(py.call("try a", "try a", ANSWER).await, "try a 0", "{mode}: our hold excludes python");
        g.release().await.expect("release");
    }
    took.sort();
    eprintln!(
        "{mode}: python release -> our waiter holds: min {:?}, median {:?}, max {:?} over {ROUNDS} (poll 50 ms)",
        took[0],
        took[ROUNDS / 2],
        took[ROUNDS - 1]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_py_release_lets_our_waiter_in() {
    their_release_lets_our_waiter_in(Mode::RedisPy).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_redis_lock_release_lets_our_waiter_in() {
    their_release_lets_our_waiter_in(Mode::PythonRedisLock).await;
}

/// We hold: the other side's `acquire(blocking=False)` fails; we release: it succeeds.
async fn our_hold_excludes_them(mode: Mode) {
    let Some(url) = server() else { return };
    let Some(mut py) = peer(&url).await else { return };
    let p = prefix();
    let locker = Locker::new(Arc::new(backend(&url, mode, &p).await));
    py.call(&format!("new b {} {p}job {}", kind(mode), LONG.as_millis()), "new b", ANSWER).await;
    let g = locker.lock("job").lease(LONG).try_acquire().await.expect("try").expect("free");
    assert_eq!(py.call("try b", "try b", ANSWER).await, "try b 0", "{mode}: our hold excludes python");
    g.release().await.expect("release");
    if mode == Mode::PythonRedisLock {
        // Our release left the signal list as python-redis-lock's own release does.
        let mut a = admin(&url).await;
        let signal = format!("lock-signal:{p}job");
        let items: Vec<String> = a.lrange(&signal, 0, -1).await.expect("lrange");
        let ttl: i64 = a.pttl(&signal).await.expect("pttl");
        assert_eq!(items, ["1"], "the signal list holds one element");
        assert!(ttl > 0 && ttl <= 1000, "the signal list expires like python-redis-lock's: {ttl} ms");
    }
    assert_eq!(py.call("try b", "try b", ANSWER).await, "try b 1", "{mode}: python takes what we released");
    assert_eq!(py.call("release b", "release b", ANSWER).await, "release b ok");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_hold_excludes_redis_py_until_released() {
    our_hold_excludes_them(Mode::RedisPy).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_hold_excludes_python_redis_lock_until_released() {
    our_hold_excludes_them(Mode::PythonRedisLock).await;
}

/// A python-redis-lock waiter, blocked in `BLPOP` on the signal list (its wait is 5 s), wakes
/// at once when we release, because our release pushes that signal. A server of its own, so
/// `blocked_clients` counts only this waiter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_release_wakes_a_blocked_python_redis_lock_waiter() {
    let Some(srv) = or_skip("redis-server", RedisServer::start()) else { return };
    let Some(mut py) = peer(&srv.url()).await else { return };
    let p = prefix();
    let locker = Locker::new(Arc::new(backend(&srv.url(), Mode::PythonRedisLock, &p).await));
    let g = locker.lock("job").lease(LONG).try_acquire().await.expect("try").expect("free");
    // expire (10 s) must be at least its wait (5 s), python-redis-lock insists.
    py.call(&format!("new w prl {p}job 10000"), "new w", ANSWER).await;
    py.send("acquire w 5").await;
    let url = srv.url();
    eventually(ANSWER, "the python waiter blocks in BLPOP", || {
        let url = url.clone();
        async move {
            let info: String =
                redis::cmd("INFO").arg("clients").query_async(&mut admin(&url).await).await.expect("info");
            info.lines().any(|l| l.trim() == "blocked_clients:1")
        }
    })
    .await;
    let released = Instant::now();
    g.release().await.expect("release");
    // Without the signal it would wake only when its 5 s BLPOP times out.
    assert_eq!(py.expect("acquire w", ANSWER).await, "acquire w 1");
    let took = released.elapsed();
    eprintln!("our release -> python-redis-lock waiter holds in {took:?} (its BLPOP timeout: 5 s)");
    assert!(took < Duration::from_millis(2500), "woken by the signal, not its timeout: {took:?}");
    assert!(locker.lock("job").try_acquire().await.expect("try").is_none(), "python holds now");
    assert_eq!(py.call("release w", "release w", ANSWER).await, "release w ok");
}

/// Increments per side in the contended tests.
const INCREMENTS: u64 = 100;

/// Mutual exclusion under contention across the two libraries: a Python thread and a Rust task
/// each add 1 to a counter in Redis `INCREMENTS` times, by a non-atomic GET and SET under the
/// shared lock; only the lock keeps the total exact. Refused attempts (ours, counted by the
/// client; Python's, counted by its peer) show the two sides met.
async fn contended_counter_stays_exact(mode: Mode) {
    let Some(url) = server() else { return };
    let Some(mut py) = peer(&url).await else { return };
    let p = prefix();
    let ours = backend(&url, mode, &p).await;
    let locker = Locker::new(Arc::new(ours.clone()));
    let counter = format!("{p}counter");
    py.call(&format!("new c {} {p}job {}", kind(mode), LONG.as_millis()), "new c", ANSWER).await;
    let started = Instant::now();
    py.send(&format!("count c {INCREMENTS} {counter}")).await;
    let mut a = admin(&url).await;
    // Start once Python has: its remaining increments overlap ours.
    eventually(ANSWER, "python counts", || {
        let mut a = a.clone();
        let counter = counter.clone();
        async move { a.get::<_, Option<u64>>(&counter).await.expect("get").is_some() }
    })
    .await;
    for _ in 0..INCREMENTS {
        let g = locker.lock("job").wait(LONG).acquire().await.expect("acquire under contention");
        let v: Option<u64> = a.get(&counter).await.expect("get");
        tokio::task::yield_now().await;
        let _: () = a.set(&counter, v.unwrap_or(0) + 1).await.expect("set");
        g.release().await.expect("release");
    }
    let done = py.expect("count c", ANSWER).await;
    let refused: u64 = done.strip_prefix("count c done ").and_then(|n| n.parse().ok()).expect(&done);
    let total: u64 = a.get(&counter).await.expect("get");
    eprintln!(
        "{mode}: {} contended increments, half from Python, in {:?}; our attempts {}, python's refused {refused}",
        2 * INCREMENTS,
        started.elapsed(),
        ours.attempts()
    );
    assert_eq!(total, 2 * INCREMENTS, "{mode}: a lost update, so two holders at once");
    assert!(
        ours.attempts() > INCREMENTS || refused > 0,
        "{mode}: neither side was ever refused: no contention tested"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contended_counter_with_redis_py_stays_exact() {
    contended_counter_stays_exact(Mode::RedisPy).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contended_counter_with_python_redis_lock_stays_exact() {
    contended_counter_stays_exact(Mode::PythonRedisLock).await;
}

/// Lease of the Python holder the next tests kill (python-redis-lock's expiry is whole seconds).
const DEAD_HOLDER_LEASE: Duration = Duration::from_secs(1);

/// A Python holder killed mid-hold: its key expires after its lease and our waiter, already
/// waiting, gets the lock.
async fn killed_holder_expires_and_we_get_it(mode: Mode) {
    let Some(url) = server() else { return };
    let Some(mut py) = peer(&url).await else { return };
    let p = prefix();
    let ours = backend(&url, mode, &p).await;
    let lock = ours.key_names("job").lock().to_owned();
    let locker = Locker::new(Arc::new(ours));
    let ms = DEAD_HOLDER_LEASE.as_millis();
    py.call(&format!("new k {} {p}job {ms}", kind(mode)), "new k", ANSWER).await;
    assert_eq!(py.call("try k", "try k", ANSWER).await, "try k 1");
    py.kill().await;
    let killed = Instant::now();
    let pttl: i64 = admin(&url).await.pttl(&lock).await.expect("pttl");
    assert!(pttl > 0, "{mode}: the dead holder's key is still there at the kill ({pttl})");
    let g = within(DEAD_HOLDER_LEASE + HANDOVER_BOUND, "our waiter gets the dead holder's lock", async {
        locker.lock("job").wait(LONG).acquire().await.expect("acquired")
    })
    .await;
    let took = killed.elapsed();
    eprintln!("{mode}: killed Python holder (lease {ms} ms, {pttl} ms left at the kill) -> ours in {took:?}");
    g.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_redis_py_holder_expires_and_we_get_it() {
    killed_holder_expires_and_we_get_it(Mode::RedisPy).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_python_redis_lock_holder_expires_and_we_get_it() {
    killed_holder_expires_and_we_get_it(Mode::PythonRedisLock).await;
}

/// A release with a token that is not the holder's changes nothing, on both sides: ours
/// (`release` with another owner token) against a Python hold, Python's (redis-py's release
/// script with another token; python-redis-lock's `Lock(name, id=other).release()`) against ours.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_token_release_is_refused_on_both_sides() {
    let Some(url) = server() else { return };
    let Some(mut py) = peer(&url).await else { return };
    let mut a = admin(&url).await;
    for (mode, refused) in [(Mode::RedisPy, "LockNotOwnedError"), (Mode::PythonRedisLock, "NotAcquired")] {
        let p = prefix();
        let ours = backend(&url, mode, &p).await;
        let lock = ours.key_names("job").lock().to_owned();
        let k = kind(mode);

        py.call(&format!("new {k} {k} {p}job {}", LONG.as_millis()), &format!("new {k}"), ANSWER).await;
        assert_eq!(py.call(&format!("try {k}"), &format!("try {k}"), ANSWER).await, format!("try {k} 1"));
        let token = py.call(&format!("token {k}"), &format!("token {k}"), ANSWER).await;
        let token = token.rsplit(' ').next().expect("token").to_owned();
        assert!(!ours.release("job", OwnerToken::random()).await.expect("release"), "{mode}: refused");
        let value: Option<String> = a.get(&lock).await.expect("get");
        assert_eq!(value.as_deref(), Some(token.as_str()), "{mode}: python still holds");
        assert_eq!(
            py.call(&format!("release {k}"), &format!("release {k}"), ANSWER).await,
            format!("release {k} ok")
        );

        let locker = Locker::new(Arc::new(ours.clone()));
        let g = locker.lock("job").lease(LONG).try_acquire().await.expect("try").expect("free");
        let other = OwnerToken::random().to_string();
        let answer = py.call(&format!("foreign {k} {other}"), &format!("foreign {k}"), ANSWER).await;
        assert_eq!(answer, format!("foreign {k} {refused}"), "{mode}: python's foreign release refused");
        let value: Option<String> = a.get(&lock).await.expect("get");
        assert!(value.is_some_and(|v| v.starts_with(&g.owner().to_string())), "{mode}: we still hold");
        g.release().await.expect("our release still works");
    }
}
