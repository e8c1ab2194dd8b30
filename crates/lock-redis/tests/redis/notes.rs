//! The holder's own steps in every mode, on a private server: a note attached with `set_note`
//! lives exactly as long as its hold (never shown with a later hold, a hand-over or after an
//! expiry), and `raise_fence` makes the next grant's token larger than the floor, for the holder
//! only.

use std::sync::LazyLock;
use std::time::Duration;

use lock_core::backend::{AcquireRequest, Attempt, LockBackend, RenewItem, Side};
use lock_core::backend::{Notes, RaiseFence};
use lock_core::{FencingToken, LeaseSignal, LockError, OwnerToken};
use lock_redis::redis::{self, aio::MultiplexedConnection};
use lock_redis::{Mode, RedisLock};
use lock_redis_testing::RedisServer;
use lock_testkit::server::or_skip;
use tokio::time::Instant;

const MODES: [Mode; 5] = [Mode::Simple, Mode::Reentrant, Mode::Fair, Mode::RedisPy, Mode::PythonRedisLock];
const LEASE: Duration = Duration::from_secs(5);

/// One private server for this binary, or `None` (tests skipped) without redis-server.
static SERVER: LazyLock<Option<RedisServer>> =
    LazyLock::new(|| or_skip("redis-server", RedisServer::start()));

async fn backend(mode: Mode) -> Option<RedisLock> {
    let srv = SERVER.as_ref()?;
    Some(RedisLock::builder().url(srv.url()).mode(mode).build().await.expect("backend"))
}

async fn admin() -> MultiplexedConnection {
    let url = SERVER.as_ref().expect("server").url();
    redis::Client::open(url).expect("url").get_multiplexed_async_connection().await.expect("admin")
}

async fn try_acquire(b: &RedisLock, key: &str, owner: OwnerToken, lease: Duration) -> Option<FencingToken> {
    let signal = LeaseSignal::new();
    let req = AcquireRequest { key, owner, lease, wait_until: None, signal: &signal, side: Side::Exclusive };
    match b.try_acquire(&req).await.expect("attempt") {
        Attempt::Acquired(g) => Some(g.fence),
        _ => None,
    }
}

async fn acquire(b: &RedisLock, key: &str, owner: OwnerToken) -> FencingToken {
    try_acquire(b, key, owner, LEASE).await.unwrap_or_else(|| panic!("{:?}: {key} is held", b.mode()))
}

async fn note(b: &RedisLock, key: &str) -> Option<String> {
    b.note(key).await.expect("note")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_note_lives_with_its_hold_and_never_shows_with_a_later_one() {
    for mode in MODES {
        let Some(b) = backend(mode).await else { return };
        assert!(b.notes().is_some() && b.fences().is_some(), "{mode}");
        let key = lock_testkit::key("note");
        let (one, two) = (OwnerToken::random(), OwnerToken::random());
        assert_eq!(note(&b, &key).await, None, "{mode}: a free key has no note");
        assert!(!b.set_note(&key, one, "early").await.expect("set"), "{mode}: not held yet");

        acquire(&b, &key, one).await;
        assert_eq!(note(&b, &key).await, None, "{mode}: a new hold has no note");
        assert!(b.set_note(&key, one, "leader 10.0.0.1:8080 ✓").await.expect("set"), "{mode}");
        assert_eq!(note(&b, &key).await.as_deref(), Some("leader 10.0.0.1:8080 ✓"), "{mode}");
        assert!(!b.set_note(&key, two, "usurper").await.expect("set"), "{mode}: a foreign owner");
        assert!(b.set_note(&key, one, "").await.expect("set"), "{mode}: replaced by an empty note");
        assert_eq!(note(&b, &key).await.as_deref(), Some(""), "{mode}");
        assert!(b.set_note(&key, one, "one").await.expect("set"));

        // The hold still behaves as one: renewed, inspected, nested, released by its owner only.
        let renewed = b.renew(&[RenewItem { key: &key, owner: one, lease: LEASE }]).await.expect("renew");
        assert_eq!(renewed, vec![true], "{mode}");
        let info = b.inspect(&key).await.expect("inspect");
        assert!(info.held && info.remaining.is_some(), "{mode}: {info:?}");
        assert_eq!(info.owner, Some(lock_core::backend::LockInfo::short_owner(&one.to_string())), "{mode}");
        assert_eq!(try_acquire(&b, &key, two, LEASE).await, None, "{mode}: still exclusive");
        if b.capabilities().reentrant {
            acquire(&b, &key, one).await;
            assert!(b.release(&key, one).await.expect("release nested"));
            assert_eq!(note(&b, &key).await.as_deref(), Some("one"), "{mode}: the outer hold keeps it");
        }
        assert!(!b.release(&key, two).await.expect("foreign release"), "{mode}");
        assert_eq!(note(&b, &key).await.as_deref(), Some("one"), "{mode}");
        assert!(b.release(&key, one).await.expect("release"), "{mode}");
        assert_eq!(note(&b, &key).await, None, "{mode}: gone with the hold");

        acquire(&b, &key, two).await;
        assert_eq!(note(&b, &key).await, None, "{mode}: the next holder starts without one");
        assert!(!b.set_note(&key, one, "stale").await.expect("set"), "{mode}: the earlier holder");
        assert!(b.set_note(&key, two, "two").await.expect("set"));
        assert_eq!(note(&b, &key).await.as_deref(), Some("two"), "{mode}");
        assert!(b.release(&key, two).await.expect("release"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_holds_note_is_not_the_next_holders() {
    for mode in MODES {
        let Some(b) = backend(mode).await else { return };
        let key = lock_testkit::key("note-expiry");
        let (one, two) = (OwnerToken::random(), OwnerToken::random());
        try_acquire(&b, &key, one, Duration::from_millis(150)).await.expect("free");
        assert!(b.set_note(&key, one, "short-lived").await.expect("set"));
        // The note keeps the hold's expiry: the key frees itself on time.
        let deadline = Instant::now() + Duration::from_secs(5);
        while try_acquire(&b, &key, two, LEASE).await.is_none() {
            assert!(Instant::now() < deadline, "{mode}: the hold with a note never expired");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(note(&b, &key).await, None, "{mode}: the expired holder's note showed");
        assert!(!b.set_note(&key, one, "late").await.expect("set"), "{mode}: the expired holder");
        assert!(b.release(&key, two).await.expect("release"));
    }
}

/// Native modes hand a freed lock to a registered waiter (a hold of that waiter, which it takes
/// or claims): the earlier holder's note is gone at once, and the claimed hold starts without one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handed_over_lock_shows_no_note() {
    for mode in [Mode::Simple, Mode::Reentrant, Mode::Fair] {
        let Some(b) = backend(mode).await else { return };
        let key = lock_testkit::key("note-handoff");
        let (one, two) = (OwnerToken::random(), OwnerToken::random());
        acquire(&b, &key, one).await;
        assert!(b.set_note(&key, one, "one").await.expect("set"));
        let signal = LeaseSignal::new();
        let wait = AcquireRequest {
            key: &key,
            owner: two,
            lease: LEASE,
            wait_until: Some(Instant::now() + Duration::from_secs(30)),
            signal: &signal,
            side: Side::Exclusive,
        };
        assert!(matches!(b.try_acquire(&wait).await.expect("wait"), Attempt::Held { .. }), "{mode}");
        assert!(b.release(&key, one).await.expect("release"));
        assert!(b.inspect(&key).await.expect("inspect").held, "{mode}: handed over to the waiter");
        assert_eq!(note(&b, &key).await, None, "{mode}: a handed-over hold has no note");
        assert!(matches!(b.try_acquire(&wait).await.expect("claim"), Attempt::Acquired(_)), "{mode}");
        assert_eq!(note(&b, &key).await, None, "{mode}");
        assert!(b.release(&key, two).await.expect("release"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raise_fence_lifts_the_next_grant_above_the_floor_for_the_holder_only() {
    for mode in MODES {
        let Some(b) = backend(mode).await else { return };
        let mut admin = admin().await;
        let key = lock_testkit::key("raise");
        let counter = b.key_names(&key).fence().to_owned();
        let (one, two) = (OwnerToken::random(), OwnerToken::random());

        let f1 = acquire(&b, &key, one).await;
        assert!(!b.raise_fence(&key, two, FencingToken(f1.0 + 1_000)).await.expect("raise"), "{mode}");
        assert!(b.release(&key, one).await.expect("release"));
        assert!(!b.raise_fence(&key, one, FencingToken(f1.0 + 1_000)).await.expect("raise"), "{mode}");
        let f2 = acquire(&b, &key, two).await;
        assert_eq!(f2.0, f1.0 + 1, "{mode}: non-holders raised nothing");

        let floor = f2.0 + 1_000_000;
        assert!(b.raise_fence(&key, two, FencingToken(floor)).await.expect("raise"), "{mode}");
        assert!(b.raise_fence(&key, two, FencingToken(f2.0)).await.expect("raise"), "{mode}: a lower floor");
        let ttl: i64 = redis::cmd("PTTL").arg(&counter).query_async(&mut admin).await.expect("pttl");
        assert!(ttl > 0 && ttl <= 86_400_000, "{mode}: the counter keeps its lifetime, PTTL {ttl}");
        assert!(b.release(&key, two).await.expect("release"));
        let f3 = acquire(&b, &key, one).await;
        assert_eq!(f3.0, floor + 1, "{mode}: the next grant draws right above the floor");

        // A missing counter (expired, or a restart without persistence) starts at the larger
        // of the floor and the server clock.
        let _: i64 = redis::cmd("DEL").arg(&counter).query_async(&mut admin).await.expect("del");
        assert!(b.raise_fence(&key, one, FencingToken(f3.0 + 10)).await.expect("raise"), "{mode}");
        let ttl: i64 = redis::cmd("PTTL").arg(&counter).query_async(&mut admin).await.expect("pttl");
        assert!(ttl > 0 && ttl <= 86_400_000, "{mode}: a restarted counter expires, PTTL {ttl}");
        assert!(b.release(&key, one).await.expect("release"));
        let f4 = acquire(&b, &key, two).await;
        assert_eq!(f4.0, f3.0 + 11, "{mode}");
        let _: i64 = redis::cmd("DEL").arg(&counter).query_async(&mut admin).await.expect("del");
        assert!(b.raise_fence(&key, two, FencingToken(5)).await.expect("raise"), "{mode}");
        assert!(b.release(&key, two).await.expect("release"));
        let f5 = acquire(&b, &key, one).await;
        assert!(f5 > FencingToken(5) && f5.0 > 1_000_000_000_000_000, "{mode}: from the clock, got {f5:?}");

        let e = b.raise_fence(&key, one, FencingToken(u64::MAX)).await.expect_err("out of range");
        assert!(matches!(e, LockError::InvalidConfig { .. }), "{mode}: {e:?}");
        assert!(b.release(&key, one).await.expect("release"));
    }
}
