//! `dlock::blocking` from plain threads (no async runtime of the test's own), on the in-process
//! backend and on the shared private Redis.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::Duration;

use dlock::LockError;
use dlock::blocking::BlockingLocker;

/// The seed scenario from plain threads: every thread does a read-modify-write that is only
/// correct under mutual exclusion (load, yield, store), and the fencing tokens of one key
/// strictly increase in the order the critical sections ran.
fn increments_under_one_lock(url: &str, threads: u64, each: u64) {
    let key = format!("blocking/{}", uuid_like());
    let counter = Arc::new(AtomicU64::new(0));
    let fences = Arc::new(std::sync::Mutex::new(Vec::new()));
    let workers: Vec<_> = (0..threads)
        .map(|_| {
            let (url, key, counter, fences) = (url.to_owned(), key.clone(), counter.clone(), fences.clone());
            thread::spawn(move || {
                let locker = BlockingLocker::connect(&url).expect("connect");
                for _ in 0..each {
                    let guard =
                        locker.lock(key.as_str()).wait(Duration::from_secs(30)).acquire().expect("acquire");
                    let seen = counter.load(Ordering::SeqCst);
                    thread::yield_now();
                    counter.store(seen + 1, Ordering::SeqCst);
                    if let Some(f) = guard.fence() {
                        fences.lock().expect("fences").push(f);
                    }
                    guard.release().expect("release");
                }
            })
        })
        .collect();
    for w in workers {
        w.join().expect("worker thread");
    }
    assert_eq!(counter.load(Ordering::SeqCst), threads * each, "a lost update means two holders");
    let fences = fences.lock().expect("fences");
    assert_eq!(fences.len() as u64, threads * each, "every grant carries a fencing token");
    assert!(fences.windows(2).all(|w| w[0] < w[1]), "fencing tokens rise in grant order");
}

fn uuid_like() -> String {
    format!("{:x}", fastrand_u64())
}

fn fastrand_u64() -> u64 {
    use std::hash::{BuildHasher, RandomState};
    RandomState::new().hash_one(std::time::SystemTime::now())
}

/// A fixed lease that runs out: a plain thread waiting on the lost signal wakes, and the
/// release reports the loss instead of pretending.
fn lost_signal_reaches_a_plain_thread(url: &str) {
    let locker = BlockingLocker::connect(url).expect("connect");
    let key = format!("blocking/lost/{}", uuid_like());
    let guard = locker
        .lock(key.as_str())
        .lease(Duration::from_millis(150))
        .try_acquire()
        .expect("try")
        .expect("free");
    assert!(!guard.is_lost());
    let lost = thread::scope(|s| {
        s.spawn(|| guard.wait_lost(Duration::from_secs(5))).join().expect("watcher thread")
    });
    assert!(lost, "the lease ran out: the watcher must see it lost");
    assert!(matches!(guard.release(), Err(LockError::LeaseLost { .. })));
}

/// Dropping a guard releases before `drop` returns: another client gets the key at once.
fn drop_releases_before_returning(url: &str) {
    let a = BlockingLocker::connect(url).expect("connect");
    let b = BlockingLocker::connect(url).expect("connect");
    let key = format!("blocking/drop/{}", uuid_like());
    let guard = a.try_lock(key.as_str()).expect("try").expect("free");
    assert!(b.try_lock(key.as_str()).expect("try").is_none(), "held by a");
    let timed_out = b.lock(key.as_str()).wait(Duration::from_millis(50)).acquire();
    assert!(matches!(timed_out, Err(LockError::Timeout { .. })), "{timed_out:?}");
    drop(guard);
    let next = b.try_lock(key.as_str()).expect("try").expect("released synchronously by drop");
    let out = a.with_lock("blocking/with", Duration::from_secs(1), |g| {
        g.fence().is_some() || g.key() == "blocking/with"
    });
    assert!(out.expect("with_lock"));
    next.release().expect("release");
}

#[test]
fn memory_from_plain_threads() {
    increments_under_one_lock("memory://blocking", 10, 1000);
    drop_releases_before_returning("memory://blocking");
    lost_signal_reaches_a_plain_thread("memory://blocking");
}

#[cfg(feature = "redis")]
#[test]
fn redis_from_plain_threads() {
    let url = lock_redis_testing::external_url().unwrap_or_else(|| lock_redis_testing::shared_redis().url());
    increments_under_one_lock(&url, 10, 100);
    drop_releases_before_returning(&url);
    lost_signal_reaches_a_plain_thread(&url);
}
