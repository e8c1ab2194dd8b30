//! Wake-ups under contention, counted (never timed): a release wakes at most one waiter, in
//! every mode, and a lock handed over to a waiter that gave up goes on to the next; a released
//! permit of a semaphore goes to one permit waiter, which holds it without a script of its own.

use std::sync::Arc;
use std::time::Duration;

use lock_core::{Locker, Semaphore};
use lock_redis::{Mode, RedisLock, redis};
use lock_redis_testing::RedisServer;
use lock_testkit::eventually;
use lock_testkit::server::or_skip;
use tokio::time::timeout;

/// Long enough that no lease runs out and no waiter's heartbeat (a third of its timeout) comes
/// during a test: every attempt counted is one a release caused.
const LONG: Duration = Duration::from_secs(60);
/// Waiters blocked on one key.
const WAITERS: usize = 8;

async fn backend(url: &str, mode: Mode) -> RedisLock {
    RedisLock::builder().url(url).mode(mode).fair_waiter_timeout(LONG).build().await.expect("backend")
}

fn total(clients: &[RedisLock]) -> u64 {
    clients.iter().map(RedisLock::attempts).sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_release_wakes_at_most_one_waiter() {
    let Some(srv) = or_skip("redis-server", RedisServer::start()) else { return };
    for mode in [Mode::Simple, Mode::Reentrant, Mode::Fair] {
        let key = format!("herd-{mode}");
        let holder = Locker::new(Arc::new(backend(&srv.url(), mode).await));
        let g = holder.lock(&key).lease(LONG).try_acquire().await.expect("try").expect("free");
        let mut clients = Vec::new();
        let mut tasks = Vec::new();
        for _ in 0..WAITERS {
            let b = backend(&srv.url(), mode).await;
            clients.push(b.clone());
            let (l, key) = (Locker::new(Arc::new(b)), key.clone());
            tasks.push(tokio::spawn(async move {
                let g = l.lock(&key).lease(LONG).wait(LONG).acquire().await.expect("waiter acquires");
                g.release().await.expect("release");
            }));
        }
        // Each waiter tries once, subscribes, tries once more (a release in between is not
        // missed) and then sleeps until a release names it.
        let blocked = 2 * WAITERS as u64;
        eventually(Duration::from_secs(10), "waiters blocked", || {
            let n = total(&clients);
            async move { n == blocked }
        })
        .await;
        g.release().await.expect("release");
        for t in tasks {
            timeout(LONG, t).await.expect("waiters finish").expect("task");
        }
        // One release by the holder and one by each waiter but the last wake one waiter each,
        // whose single attempt takes the lock.
        let woken = total(&clients) - blocked;
        assert!(woken <= WAITERS as u64, "{mode}: {woken} attempts after {WAITERS} releases");
        // Each waiter heard its hand-over before its attempt and held without a round trip.
        let taken: u64 = clients.iter().map(RedisLock::taken_handoffs).sum();
        assert_eq!(taken, WAITERS as u64, "{mode}: hand-overs taken without a round trip");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_handed_to_a_waiter_that_gave_up_goes_to_the_next() {
    let Some(srv) = or_skip("redis-server", RedisServer::start()) else { return };
    for mode in [Mode::Simple, Mode::Reentrant, Mode::Fair] {
        let key = format!("gaveup-{mode}");
        let holder = Locker::new(Arc::new(backend(&srv.url(), mode).await));
        let g = holder.lock(&key).lease(LONG).try_acquire().await.expect("try").expect("free");
        let (first, second) = (backend(&srv.url(), mode).await, backend(&srv.url(), mode).await);
        let lf = Locker::new(Arc::new(first.clone()));
        let k = key.clone();
        let quitter = tokio::spawn(async move { lf.lock(&k).lease(LONG).wait(LONG).acquire().await });
        eventually(Duration::from_secs(10), "first waiter blocked", || {
            let n = first.attempts();
            async move { n == 2 }
        })
        .await;
        let ls = Locker::new(Arc::new(second.clone()));
        let k = key.clone();
        let next = tokio::spawn(async move { ls.lock(&k).lease(LONG).wait(LONG).acquire().await });
        eventually(Duration::from_secs(10), "second waiter blocked", || {
            let n = second.attempts();
            async move { n == 2 }
        })
        .await;
        // The release hands the lock to the first waiter, which gives up before claiming it
        // (or just after: then its leave undoes nothing and the release goes to the second).
        g.release().await.expect("release");
        quitter.abort();
        let _ = quitter.await;
        // Without the leave passing the lock on, the second waiter would wait out the claim
        // window (20 s here).
        let g2 =
            timeout(Duration::from_secs(10), next).await.expect("passed on").expect("task").expect("acquire");
        g2.release().await.expect("release");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_released_permit_wakes_one_permit_waiter() {
    let Some(srv) = or_skip("redis-server", RedisServer::start()) else { return };
    for mode in [Mode::Simple, Mode::Fair] {
        let name = format!("permit-herd-{mode}");
        let holder = Semaphore::new(&Locker::new(Arc::new(backend(&srv.url(), mode).await)), &name, 2)
            .expect("semaphore");
        assert!(holder.is_native(), "Redis keeps the permits");
        let held = holder.acquire().lease(LONG).try_acquire_many(2).await.expect("try").expect("free");
        let mut clients = Vec::new();
        let mut tasks = Vec::new();
        for _ in 0..WAITERS {
            let b = backend(&srv.url(), mode).await;
            clients.push(b.clone());
            let s = Semaphore::new(&Locker::new(Arc::new(b)), &name, 2).expect("semaphore");
            tasks.push(tokio::spawn(async move {
                let p = s.acquire().lease(LONG).wait(LONG).acquire().await.expect("waiter acquires");
                p.release().await.expect("release");
            }));
        }
        // Each waiter makes a single attempt, then waits: tries once (registering), subscribes,
        // tries once more and sleeps until a release names it.
        let blocked = 3 * WAITERS as u64;
        eventually(Duration::from_secs(10), "permit waiters blocked", || {
            let n = total(&clients);
            async move { n == blocked }
        })
        .await;
        held.release().await.expect("release");
        for t in tasks {
            timeout(LONG, t).await.expect("waiters finish").expect("task");
        }
        // Each of the 8 grants took one attempt; waking every waiter at each release made 8 +
        // 7 + ... attempts.
        let woken = total(&clients) - blocked;
        assert!(woken <= WAITERS as u64 + 1, "{mode}: {woken} attempts for {WAITERS} permits");
        // Each release handed its permit to the next waiter, which held it on hearing so:
        // none of the grants cost a script of the waiter's own.
        let taken: u64 = clients.iter().map(RedisLock::taken_handoffs).sum();
        assert_eq!(taken, WAITERS as u64, "{mode}: permits held from a hand-over");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_woken_for_a_waiter_that_gave_up_goes_to_the_next() {
    let Some(srv) = or_skip("redis-server", RedisServer::start()) else { return };
    let name = "permit-gaveup";
    let sem = |b: &RedisLock| Semaphore::new(&Locker::new(Arc::new(b.clone())), name, 1).expect("semaphore");
    let held = sem(&backend(&srv.url(), Mode::Simple).await).acquire().lease(LONG).try_acquire().await;
    let held = held.expect("try").expect("free");
    let (first, second) = (backend(&srv.url(), Mode::Simple).await, backend(&srv.url(), Mode::Simple).await);
    let s = sem(&first);
    let quitter = tokio::spawn(async move { s.acquire().lease(LONG).wait(LONG).acquire().await });
    eventually(Duration::from_secs(10), "first waiter blocked", || {
        let n = first.attempts();
        async move { n == 3 }
    })
    .await;
    let s = sem(&second);
    let next = tokio::spawn(async move { s.acquire().lease(LONG).wait(LONG).acquire().await });
    eventually(Duration::from_secs(10), "second waiter blocked", || {
        let n = second.attempts();
        async move { n == 3 }
    })
    .await;
    // The release wakes the first waiter, which gives up before taking the permit (or just
    // after: then its permit's release wakes the second).
    held.release().await.expect("release");
    quitter.abort();
    let _ = quitter.await;
    // Without the leave passing the wake on, the second waiter would sleep until its heartbeat
    // (20 s here).
    let p = timeout(Duration::from_secs(10), next).await.expect("passed on").expect("task").expect("acquire");
    p.release().await.expect("release");
}

/// A client whose subscription to a key is still live (an earlier wait on it) subscribes
/// before its waiting attempt: a refusal then waits at once, with no second attempt to cover a
/// release that could have run before the subscription, and the release still wakes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_already_subscribed_tries_once_before_waiting() {
    let Some(srv) = or_skip("redis-server", RedisServer::start()) else { return };
    for mode in [Mode::Simple, Mode::Fair] {
        let key = format!("subscribed-{mode}");
        let holder = Locker::new(Arc::new(backend(&srv.url(), mode).await));
        let waiter = backend(&srv.url(), mode).await;
        let lw = Locker::new(Arc::new(waiter.clone()));
        let admin = redis::Client::open(srv.url().as_str())
            .expect("url")
            .get_multiplexed_async_connection()
            .await
            .expect("admin");
        let waiters = waiter.key_names(&key).waiters().to_owned();
        let mut g = holder.lock(&key).lease(LONG).try_acquire().await.expect("try").expect("free");
        for round in 0..2 {
            let before = waiter.attempts();
            let (l, k) = (lw.clone(), key.clone());
            let next = tokio::spawn(async move { l.lock(&k).lease(LONG).wait(LONG).acquire().await });
            // The first round subscribes after its refused attempt and tries once more.
            let refused = if round == 0 { 2 } else { 1 };
            // Counted when sent, registered when run: both, so the release comes after the
            // refusal.
            eventually(Duration::from_secs(10), "waiter blocked", || {
                let (n, conn, waiters) = (waiter.attempts(), admin.clone(), waiters.clone());
                async move { n == before + refused && queued(conn, &waiters).await == 1 }
            })
            .await;
            let taken = waiter.taken_handoffs();
            g.release().await.expect("release");
            let w =
                timeout(Duration::from_secs(10), next).await.expect("woken").expect("task").expect("acquire");
            // One more attempt: the hand-over, held without a round trip.
            assert_eq!(waiter.attempts(), before + refused + 1, "{mode}, round {round}");
            assert_eq!(waiter.taken_handoffs(), taken + 1, "{mode}, round {round}");
            // The lock goes back to the holder by a hand-over, told on the holder's inbox: a
            // release with nobody queued would publish on the key's channel, which the waiter's
            // client still hears, and that message, read after the next waiter subscribed,
            // would wake it for an attempt the release did not need (the client cannot tell it
            // from a release after its attempt).
            let (h, k) = (holder.clone(), key.clone());
            let back = tokio::spawn(async move { h.lock(&k).lease(LONG).wait(LONG).acquire().await });
            eventually(Duration::from_secs(10), "holder queued", || {
                let (conn, waiters) = (admin.clone(), waiters.clone());
                async move { queued(conn, &waiters).await == 1 }
            })
            .await;
            w.release().await.expect("release");
            g = timeout(Duration::from_secs(10), back)
                .await
                .expect("handed back")
                .expect("task")
                .expect("acquire");
        }
        g.release().await.expect("release");
    }
}

/// Waiters registered in a lock's wait set.
async fn queued(mut conn: redis::aio::MultiplexedConnection, waiters: &str) -> u64 {
    redis::cmd("ZCARD").arg(waiters).query_async(&mut conn).await.expect("zcard")
}

/// A waiter whose process died without warning (no clean-up ran) is still registered, its
/// liveness deadline far off, but its client's inbox has no subscriber any more: a release
/// passes it over for the next waiter at once, for a lock in every mode and for a permit,
/// instead of handing it the key for a claim window (20 s here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_passes_over_a_waiter_nobody_listens_for() {
    let Some(srv) = or_skip("redis-server", RedisServer::start()) else { return };
    let mut admin = redis::Client::open(srv.url().as_str())
        .expect("url")
        .get_multiplexed_async_connection()
        .await
        .expect("admin");
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query_async(&mut admin).await.expect("time");
    let far = secs * 1000 + micros / 1000 + LONG.as_millis() as u64;
    // Two dead waiters: owner token, then the tag (the id of their client, then its inbox).
    let dead = ["dead0000000000000000000000000001", "dead0000000000000000000000000002"];
    let tag = "c1ed0000000000000000000000000000dlock:inbox:gone";
    for mode in [Mode::Simple, Mode::Reentrant, Mode::Fair] {
        let key = format!("dead-inbox-{mode}");
        let holder = backend(&srv.url(), mode).await;
        let g = Locker::new(Arc::new(holder.clone())).lock(&key).lease(LONG).try_acquire().await;
        let g = g.expect("try").expect("free");
        let names = holder.key_names(&key);
        for d in dead {
            let _: () = redis::pipe()
                .cmd("RPUSH")
                .arg(names.queue())
                .arg(format!("{d}{tag}"))
                .cmd("ZADD")
                .arg(names.waiters())
                .arg(far)
                .arg(d)
                .query_async(&mut admin)
                .await
                .expect("register a dead waiter");
        }
        let w = backend(&srv.url(), mode).await;
        let l = Locker::new(Arc::new(w.clone()));
        let k = key.clone();
        let waiter = tokio::spawn(async move { l.lock(&k).lease(LONG).wait(LONG).acquire().await });
        eventually(Duration::from_secs(10), "the live waiter blocked", || {
            let n = w.attempts();
            async move { n >= 2 }
        })
        .await;
        g.release().await.expect("release");
        let got = timeout(Duration::from_secs(10), waiter).await;
        let got = got.unwrap_or_else(|_| panic!("{mode}: the release handed the key to a dead waiter"));
        got.expect("task").expect("acquire").release().await.expect("release");
    }
    // A permit waiter the same way.
    let name = "dead-inbox-permit";
    let b = backend(&srv.url(), Mode::Simple).await;
    let sem = |b: &RedisLock| Semaphore::new(&Locker::new(Arc::new(b.clone())), name, 1).expect("semaphore");
    let held = sem(&b).acquire().lease(LONG).try_acquire().await.expect("try").expect("free");
    let pool = b.key_names(&format!("{name}#sp")).lock().to_owned();
    for d in dead {
        let _: () = redis::pipe()
            .cmd("ZADD")
            .arg(format!("{pool}:pq"))
            .arg(far)
            .arg(d)
            .cmd("HSET")
            .arg(format!("{pool}:pt"))
            .arg(d)
            .arg(tag)
            .query_async(&mut admin)
            .await
            .expect("register a dead permit waiter");
    }
    let w = backend(&srv.url(), Mode::Simple).await;
    let s = sem(&w);
    let waiter = tokio::spawn(async move { s.acquire().lease(LONG).wait(LONG).acquire().await });
    eventually(Duration::from_secs(10), "the live permit waiter blocked", || {
        let n = w.attempts();
        async move { n >= 3 }
    })
    .await;
    held.release().await.expect("release");
    let got = timeout(Duration::from_secs(10), waiter)
        .await
        .expect("the release handed the permit to a dead waiter");
    got.expect("task").expect("acquire").release().await.expect("release");
}
