//! Force-unlock (`evict`) in the interop modes (redis-py, python-redis-lock), on a private
//! server: a hold of ours shows its fence and is evicted by it alone (its renewal is then
//! refused, the next grant draws a larger fence, a resent eviction does nothing), waking
//! python-redis-lock's waiters through its signal list; a hold of the other library's client
//! shows no fence and no fence evicts it.

use std::sync::LazyLock;
use std::time::Duration;

use lock_core::backend::{AcquireRequest, Attempt, LockBackend, RenewItem, Side};
use lock_core::backend::{Admin, Notes};
use lock_core::{FencingToken, LeaseSignal, OwnerToken};
use lock_redis::redis::{self, AsyncCommands, aio::MultiplexedConnection};
use lock_redis::{Mode, RedisLock};
use lock_redis_testing::RedisServer;
use lock_testkit::server::or_skip;

const INTEROP: [Mode; 2] = [Mode::RedisPy, Mode::PythonRedisLock];
const LEASE: Duration = Duration::from_secs(30);

/// One private server for this binary, or `None` (tests skipped) without redis-server.
static SERVER: LazyLock<Option<RedisServer>> =
    LazyLock::new(|| or_skip("redis-server", RedisServer::start()));

async fn backend(mode: Mode) -> Option<RedisLock> {
    let srv = SERVER.as_ref()?;
    let prefix = format!("ev-{}:", &OwnerToken::random().to_string()[..8]);
    Some(RedisLock::builder().url(srv.url()).mode(mode).key_prefix(prefix).build().await.expect("backend"))
}

async fn admin() -> MultiplexedConnection {
    let url = SERVER.as_ref().expect("server").url();
    redis::Client::open(url).expect("url").get_multiplexed_async_connection().await.expect("admin")
}

async fn take(b: &RedisLock, key: &str, owner: OwnerToken) -> Option<FencingToken> {
    let signal = LeaseSignal::new();
    let req =
        AcquireRequest { key, owner, lease: LEASE, wait_until: None, signal: &signal, side: Side::Exclusive };
    match b.try_acquire(&req).await.expect("attempt") {
        Attempt::Acquired(g) => Some(g.fence),
        _ => None,
    }
}

#[tokio::test]
async fn a_hold_of_ours_is_evicted_by_its_fence_alone() {
    for mode in INTEROP {
        let Some(b) = backend(mode).await else { return };
        let (key, owner) = ("job", OwnerToken::random());
        let fence = take(&b, key, owner).await.expect("granted");
        // A note rewrites the value (token, nonce, ':', note): still ours.
        assert!(b.set_note(key, owner, "host:1 cmd=sh").await.expect("note"), "{mode}");
        let info = b.inspect(key).await.expect("inspect");
        assert_eq!(info.fence, Some(fence), "{mode}: inspect names the hold by its fence");
        assert!(!b.evict(key, FencingToken(fence.0 + 1)).await.expect("evict"), "{mode}: another fence");
        assert!(b.inspect(key).await.expect("inspect").held, "{mode}: left alone");
        let signal = b.key_names(key).signal().map(str::to_owned);
        let mut admin = admin().await;
        if let Some(s) = &signal {
            let _: () = admin.del(s).await.expect("del");
        }
        assert!(b.evict(key, fence).await.expect("evict"), "{mode}: evicted");
        assert!(!b.inspect(key).await.expect("inspect").held, "{mode}: freed");
        if let Some(s) = &signal {
            // python-redis-lock's waiters block in BLPOP on it: pushed as by its own release.
            let pushed: Vec<String> = admin.lrange(s, 0, -1).await.expect("lrange");
            assert_eq!(pushed, ["1"], "{mode}: the signal list");
        }
        let renewed = b.renew(&[RenewItem { key, owner, lease: LEASE }]).await.expect("renew");
        assert_eq!(renewed, [false], "{mode}: the evicted holder's renewal is refused");
        assert!(!b.evict(key, fence).await.expect("evict"), "{mode}: a resent eviction does nothing");
        let next = take(&b, key, OwnerToken::random()).await.expect("the next grant");
        assert!(next > fence, "{mode}: {next:?} after {fence:?}");
        assert!(!b.evict(key, fence).await.expect("evict"), "{mode}: the next holder stays");
        assert!(b.inspect(key).await.expect("inspect").held, "{mode}");
    }
}

#[tokio::test]
async fn the_other_librarys_hold_shows_no_fence_and_stays() {
    for mode in INTEROP {
        let Some(b) = backend(mode).await else { return };
        let key = "theirs";
        // Our earlier hold leaves the counter at its fence: the number an operator might try.
        let owner = OwnerToken::random();
        let fence = take(&b, key, owner).await.expect("granted");
        assert!(b.release(key, owner).await.expect("release"));
        // The other library's token: redis-py's uuid1().hex, python-redis-lock's 24 base64
        // characters; both take the key with SET NX PX.
        let token = if mode == Mode::RedisPy {
            "1f0b6f1ac8a111efb1c2a4bb6d5e8f90"
        } else {
            "q2Zk1mQbQ0yqv3D7Xk8dAw=="
        };
        let lock = b.key_names(key).lock().to_owned();
        let mut admin = admin().await;
        let set: Option<String> = redis::cmd("SET")
            .arg(&lock)
            .arg(token)
            .arg("NX")
            .arg("PX")
            .arg(30_000)
            .query_async(&mut admin)
            .await
            .expect("set");
        assert!(set.is_some(), "{mode}: the other side holds");
        let info = b.inspect(key).await.expect("inspect");
        assert!(info.held && info.fence.is_none(), "{mode}: no fence for their hold: {info:?}");
        assert!(
            !b.evict(key, fence).await.expect("evict"),
            "{mode}: the counter's value names no hold of theirs"
        );
        let still: Option<String> = admin.get(&lock).await.expect("get");
        assert_eq!(still.as_deref(), Some(token), "{mode}: their hold stays");
        let _: () = admin.del(&lock).await.expect("del");
    }
}
