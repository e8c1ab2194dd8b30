//! Fault tests on private redis-servers: crashes, pauses, killed connections, the fair queue,
//! odd keys; ACL authentication in `faults/acl.rs`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_core::{LeaseState, LockError, Locker};
use lock_redis::redis::{self, aio::ConnectionManager};
use lock_redis::{Mode, RedisLock};
use lock_redis_testing::RedisServer;
use lock_testkit::eventually;
use lock_testkit::server::or_skip;
use tokio::time::{Instant, timeout};

const LEASE: Duration = Duration::from_millis(600);

// Not `tests/acl.rs`: cargo would take that for a test binary of its own.
#[path = "faults/acl.rs"]
mod acl;

/// A private server, or `None` (test skipped) when redis-server is not installed.
fn server(args: &[&str]) -> Option<RedisServer> {
    or_skip("redis-server", RedisServer::start_with(args))
}

async fn backend(url: &str, mode: Mode) -> RedisLock {
    RedisLock::builder()
        .url(url)
        .mode(mode)
        .fair_waiter_timeout(LEASE)
        .response_timeout(Duration::from_millis(500))
        .connection_timeout(Duration::from_millis(500))
        .build()
        .await
        .expect("backend")
}

fn locker(b: &RedisLock) -> Locker {
    Locker::new(Arc::new(b.clone())).with_watchdog_lease(LEASE).expect("lease")
}

async fn admin(url: &str) -> ConnectionManager {
    redis::Client::open(url).expect("url").get_connection_manager().await.expect("admin")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_restart_without_persistence_fires_lost_and_frees_the_key() {
    let Some(srv) = server(&[]) else { return };
    let b = backend(&srv.url(), Mode::Simple).await;
    let a = locker(&b);
    let g = a.lock("restart").try_acquire().await.expect("try").expect("free");
    let old_fence = g.fence();
    srv.kill().expect("kill");
    srv.restart().expect("restart");
    timeout(LEASE * 10, g.lost()).await.expect("lost signal after the restart");
    assert!(matches!(g.state(), LeaseState::Lost(_)));
    let other = locker(&backend(&srv.url(), Mode::Simple).await);
    let g2 = other.lock("restart").wait(Duration::from_secs(5)).acquire().await.expect("new client acquires");
    assert!(g2.fence() > old_fence, "fence must survive a restart without persistence");
    g2.release().await.expect("release");
    assert!(matches!(g.release().await, Err(LockError::LeaseLost { .. })));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_server_fires_lost_by_the_local_deadline() {
    let Some(srv) = server(&[]) else { return };
    let b = backend(&srv.url(), Mode::Simple).await;
    let a = locker(&b);
    let g = a.lock("pause").try_acquire().await.expect("try").expect("free");
    srv.pause().expect("pause");
    let paused = Instant::now();
    let r = timeout(LEASE + Duration::from_millis(400), g.lost()).await;
    let waited = paused.elapsed();
    srv.resume().expect("resume");
    r.unwrap_or_else(|_| panic!("lost signal not fired {waited:?} into a pause (lease {LEASE:?})"));
    assert!(waited <= LEASE + Duration::from_millis(400));
    // After the pause the server is usable again and the expired key is free.
    let other = locker(&backend(&srv.url(), Mode::Simple).await);
    other
        .lock("pause")
        .wait(Duration::from_secs(5))
        .acquire()
        .await
        .expect("acquire")
        .release()
        .await
        .expect("r");
}

async fn client_id(b: &RedisLock) -> i64 {
    redis::cmd("CLIENT").arg("ID").query_async(&mut b.connection()).await.expect("client id")
}

/// Whether exactly one connection is subscribed to `channel`.
async fn one_subscriber(adm: &ConnectionManager, channel: &str) -> bool {
    let n: Vec<(String, i64)> = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(channel)
        .query_async(&mut adm.clone())
        .await
        .unwrap_or_default();
    n.first().is_some_and(|(_, c)| *c == 1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_connection_reconnects_and_keeps_the_lock() {
    let Some(srv) = server(&[]) else { return };
    let mut adm = admin(&srv.url()).await;
    let b = backend(&srv.url(), Mode::Reentrant).await;
    let a = locker(&b);
    let other = locker(&backend(&srv.url(), Mode::Reentrant).await);
    let g = a.lock("kill").try_acquire().await.expect("try").expect("free");
    let id = client_id(&b).await;
    let killed: i64 =
        redis::cmd("CLIENT").arg("KILL").arg("ID").arg(id).query_async(&mut adm).await.expect("kill");
    assert_eq!(killed, 1);
    // Several renewal periods later the lock is still ours and confirmed.
    tokio::time::sleep(LEASE * 2).await;
    assert!(!g.is_lost(), "a killed connection must not lose a Redis lease");
    assert!(other.try_lock("kill").await.expect("try").is_none());
    eventually(Duration::from_secs(3), "lease confirmed again", || {
        let s = g.state();
        async move { s == LeaseState::Held }
    })
    .await;
    assert_ne!(client_id(&b).await, id, "a new connection");
    g.release().await.expect("release after reconnect");

    let channel = b.key_names("kill").channel().to_owned();
    // The shared subscriber reconnects too: a waiter blocked across `CLIENT KILL TYPE pubsub`
    // still wakes on the release.
    let g =
        other.lock("kill").lease(Duration::from_secs(30)).try_acquire().await.expect("try").expect("free");
    let waiter = tokio::spawn(async move {
        let g = a.lock("kill").wait(Duration::from_secs(10)).acquire().await;
        (Instant::now(), g)
    });
    eventually(Duration::from_secs(3), "waiter subscribed", || one_subscriber(&adm, &channel)).await;
    let _: i64 =
        redis::cmd("CLIENT").arg("KILL").arg("TYPE").arg("pubsub").query_async(&mut adm).await.expect("kill");
    eventually(Duration::from_secs(5), "subscriber back", || one_subscriber(&adm, &channel)).await;
    let released = Instant::now();
    g.release().await.expect("release");
    let (got, g2) = timeout(Duration::from_secs(5), waiter).await.expect("waiter").expect("task");
    let g2 = g2.expect("waiter acquires");
    assert!(got - released < Duration::from_secs(1), "handoff after resubscribe took {:?}", got - released);
    g2.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_mode_serves_waiters_in_arrival_order() {
    let Some(srv) = server(&[]) else { return };
    let mut adm = admin(&srv.url()).await;
    let holder = locker(&backend(&srv.url(), Mode::Fair).await);
    let b = backend(&srv.url(), Mode::Fair).await;
    let queue = b.key_names("fifo").queue().to_owned();
    let g =
        holder.lock("fifo").lease(Duration::from_secs(30)).try_acquire().await.expect("try").expect("free");
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..5usize {
        let l = locker(&backend(&srv.url(), Mode::Fair).await);
        let order = order.clone();
        tasks.push(tokio::spawn(async move {
            let g = l.lock("fifo").wait(Duration::from_secs(20)).acquire().await.expect("waiter acquires");
            order.lock().expect("order").push(i);
            g.release().await.expect("release");
        }));
        eventually(Duration::from_secs(3), "waiter queued", || {
            let mut adm = adm.clone();
            let queue = queue.clone();
            async move { redis::cmd("LLEN").arg(queue).query_async::<usize>(&mut adm).await.unwrap_or(0) == i + 1 }
        })
        .await;
    }
    // A newcomer may not jump the queue, even right after the release.
    g.release().await.expect("release");
    assert!(holder.try_lock("fifo").await.expect("try").is_none() || order.lock().expect("order").len() == 5);
    for t in tasks {
        timeout(Duration::from_secs(20), t).await.expect("waiters finish").expect("task");
    }
    assert_eq!(*order.lock().expect("order"), vec![0, 1, 2, 3, 4]);
    let left: usize = redis::cmd("LLEN").arg(&queue).query_async(&mut adm).await.expect("llen");
    assert_eq!(left, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_mode_dead_waiter_blocks_only_until_its_timeout() {
    let Some(srv) = server(&[]) else { return };
    let mut adm = admin(&srv.url()).await;
    let b = backend(&srv.url(), Mode::Fair).await;
    let names = b.key_names("dead");
    let holder = locker(&b);
    let g =
        holder.lock("dead").lease(Duration::from_secs(30)).try_acquire().await.expect("try").expect("free");
    // A waiter that queued and then crashed: in the queue with a deadline, never heard of again.
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query_async(&mut adm).await.expect("time");
    let dead_until = secs * 1000 + micros / 1000 + LEASE.as_millis() as u64;
    let _: () = redis::pipe()
        .cmd("RPUSH")
        .arg(names.queue())
        .arg("dead0000000000000000000000000000")
        .cmd("ZADD")
        .arg(names.waiters())
        .arg(dead_until)
        .arg("dead0000000000000000000000000000")
        .query_async(&mut adm)
        .await
        .expect("inject dead waiter");
    let w = locker(&backend(&srv.url(), Mode::Fair).await);
    let waiter = tokio::spawn(async move { w.lock("dead").wait(Duration::from_secs(10)).acquire().await });
    g.release().await.expect("release");
    let released = Instant::now();
    let g2 = timeout(Duration::from_secs(5), waiter).await.expect("not blocked forever").expect("task");
    let g2 = g2.expect("live waiter acquires after the dead one times out");
    let took = released.elapsed();
    assert!(took < LEASE * 3, "dead waiter blocked the queue for {took:?}");
    g2.release().await.expect("release");
    let left: usize = redis::cmd("LLEN").arg(names.queue()).query_async(&mut adm).await.expect("llen");
    assert_eq!(left, 0, "dead waiter purged");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn braces_and_lua_metacharacters_in_keys() {
    let Some(srv) = server(&[]) else { return };
    let mut adm = admin(&srv.url()).await;
    let odd = ["a{b}c", "a%7Bb%7Dc", "{", "}", "}{", "]]..'\"%s--[[ os.exit() ]]", "{x}y{z}", "%25"];
    // The interop modes store the key as is: each odd key is its own name there too.
    for mode in [Mode::Simple, Mode::Reentrant, Mode::Fair, Mode::RedisPy, Mode::PythonRedisLock] {
        let (ba, bb) = (backend(&srv.url(), mode).await, backend(&srv.url(), mode).await);
        let (a, b) = (locker(&ba), locker(&bb));
        let mut guards = Vec::new();
        for k in odd {
            let g =
                a.try_lock(k).await.expect("odd key").unwrap_or_else(|| panic!("{mode:?}: {k:?} aliased"));
            assert!(b.try_lock(k).await.expect("odd key").is_none(), "{mode:?}: {k:?} not exclusive");
            let exists: i64 = redis::cmd("EXISTS")
                .arg(ba.key_names(k).lock().to_owned())
                .query_async(&mut adm)
                .await
                .expect("exists");
            assert_eq!(exists, 1, "{mode:?}: {k:?} stored under its own name");
            guards.push(g);
        }
        for g in guards {
            g.release().await.expect("release");
        }
        for k in odd {
            b.try_lock(k).await.expect("odd").expect("free again").release().await.expect("release");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn from_url_reads_mode_and_key_prefix() {
    let Some(srv) = server(&[]) else { return };
    let b = RedisLock::from_url(&format!("{}?mode=fair&key_prefix=app:", srv.url())).await.expect("from_url");
    assert_eq!(b.mode(), Mode::Fair);
    assert!(b.key_names("k").lock().to_owned().starts_with("app:{k}"));
    let e = RedisLock::from_url(&format!("{}?mode=nope", srv.url())).await.expect_err("bad mode");
    assert!(matches!(e, LockError::InvalidConfig { .. }));
    locker(&b).try_lock("k").await.expect("try").expect("free").release().await.expect("release");
    // The interop modes: no prefix unless given; the other library's name, unescaped.
    let b = RedisLock::from_url(&format!("{}?mode=redis-py", srv.url())).await.expect("from_url");
    assert_eq!((b.mode(), b.key_names("{k}").lock().to_owned().as_str()), (Mode::RedisPy, "{k}"));
    let url = format!("{}?key_prefix=app%3A&mode=python-redis-lock", srv.url());
    let b = RedisLock::from_url(&url).await.expect("from_url");
    let names = b.key_names("k");
    assert_eq!((names.lock(), names.signal()), ("lock:app:k", Some("lock-signal:app:k")));
    locker(&b).try_lock("k").await.expect("try").expect("free").release().await.expect("release");
}

/// Per-key fence counters are reclaimed (a TTL of a day from creation), and a key whose counter
/// is gone, as after that TTL, still gets a larger fence: it restarts from the server clock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fence_counters_expire_and_fences_keep_growing() {
    let Some(srv) = server(&[]) else { return };
    let url = srv.url();
    let mut adm = admin(&url).await;
    for mode in [Mode::Simple, Mode::Reentrant, Mode::Fair, Mode::RedisPy, Mode::PythonRedisLock] {
        let b = backend(&url, mode).await;
        let l = locker(&b);
        let key = format!("fence-ttl-{mode:?}");
        let counter = b.key_names(&key).fence().to_owned();
        let g = l.try_lock(&key).await.expect("try").expect("free");
        let first = g.fence().expect("redis fences");
        g.release().await.expect("release");
        let ttl: i64 = redis::cmd("PTTL").arg(&counter).query_async(&mut adm).await.expect("PTTL");
        assert!(ttl > 0 && ttl <= 86_400_000, "{mode:?}: fence counter PTTL {ttl}: it must expire");
        let _: i64 = redis::cmd("DEL").arg(&counter).query_async(&mut adm).await.expect("DEL");
        let g = l.try_lock(&key).await.expect("try").expect("free");
        assert!(
            g.fence().expect("redis fences") > first,
            "{mode:?}: fence went back after the counter expired"
        );
        g.release().await.expect("release");
    }
}

/// Two backends over one server with different key prefixes are different lock spaces, and
/// say so in their identity; no credentials appear in it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identity_names_server_database_and_prefix() {
    use lock_core::LockBackend;
    let Some(srv) = server(&[]) else { return };
    let a = RedisLock::builder().url(srv.url()).key_prefix("a:").build().await.expect("a");
    let b = RedisLock::builder().url(srv.url()).key_prefix("b:").build().await.expect("b");
    let a2 = RedisLock::builder().url(srv.url()).key_prefix("a:").build().await.expect("a2");
    assert_ne!(a.identity(), b.identity());
    assert_eq!(a.identity(), a2.identity(), "two clients of one lock space agree");
    assert!(a.identity().contains("a:") && a.identity().starts_with("redis://"), "{}", a.identity());
}
