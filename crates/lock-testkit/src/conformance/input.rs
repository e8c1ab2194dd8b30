//! Input: bad keys, leases and waits get typed errors; odd but valid keys work and stay
//! distinct.

use std::time::Duration;

use lock_core::{LockError, MAX_KEY_BYTES, MultiLock};

use super::{Factory, assert_free, key, locker};

/// Keys with bytes that break naive escaping in Redis, SQL, Lua or ZooKeeper paths.
pub const ODD_KEYS: &[&str] = &[
    "with space",
    "quote'single",
    "quote\"double",
    "sql--comment",
    "semi;colon; DROP TABLE locks;",
    "back\\slash",
    "lua]]..'..",
    "{hash}tag}",
    "{",
    "/slash/path/",
    ".",
    "..",
    "percent%25%",
    "ünïcødé-ключ-锁-🔒",
    "*?[glob]",
];

/// 13. Bad input gets typed errors (never a panic); odd but valid keys work and stay distinct.
pub async fn bad_input<F: Factory + ?Sized>(f: &F) {
    let (a, b) = (locker(f).await, locker(f).await);
    let long = "k".repeat(MAX_KEY_BYTES + 1);
    for bad in ["", long.as_str(), "nul\0byte", "line\nbreak"] {
        assert!(
            matches!(a.try_lock(bad).await, Err(LockError::InvalidKey { .. })),
            "key {bad:?} must be refused"
        );
    }
    let k = key("bad");
    assert!(matches!(
        a.lock(&k).lease(Duration::ZERO).try_acquire().await,
        Err(LockError::InvalidLease { .. })
    ));
    assert!(matches!(
        a.lock(&k).lease(Duration::MAX).try_acquire().await,
        Err(LockError::InvalidLease { .. })
    ));
    assert!(matches!(a.lock(&k).wait(Duration::MAX).acquire().await, Err(LockError::InvalidWait { .. })));
    // Absurd durations anywhere saturate or give typed errors, never an overflow panic.
    assert!(matches!(
        MultiLock::new().with(&a, &k).acquire(Duration::MAX, None).await,
        Err(LockError::InvalidWait { .. })
    ));
    let held = a.lock(&k).lease(Duration::from_secs(30)).try_acquire().await.expect("try").expect("free");
    let slow = locker(f).await.with_poll_backoff(Duration::MAX, Duration::MAX);
    assert!(matches!(
        slow.lock(&k).wait(Duration::from_millis(50)).acquire().await,
        Err(LockError::Timeout { .. })
    ));
    assert!(matches!(
        locker(f).await.with_clock_drift(f64::NAN, Duration::MAX),
        Err(LockError::InvalidConfig { .. })
    ));
    held.release().await.expect("release");
    assert!(matches!(
        locker(f).await.with_watchdog_lease(Duration::ZERO),
        Err(LockError::InvalidLease { .. })
    ));
    // The longest valid key, built on the run prefix so runs stay apart.
    let mut longest = key("max");
    while longest.len() < MAX_KEY_BYTES {
        longest.push('x');
    }
    let base = key("odd");
    let mut keys: Vec<String> = ODD_KEYS.iter().map(|k| format!("{base}{k}")).collect();
    keys.push(longest);
    let mut guards = Vec::new();
    for k in &keys {
        let g = a.try_lock(k).await.expect("odd key").unwrap_or_else(|| panic!("odd key {k:?} must be free"));
        assert!(b.try_lock(k).await.expect("odd key").is_none(), "odd key {k:?} not exclusive");
        guards.push(g);
    }
    // Distinct odd keys must not alias one another or their common prefix.
    let prefix = b.try_lock(&base).await.expect("prefix").expect("odd keys aliased their prefix");
    prefix.release().await.expect("release prefix");
    for g in guards {
        g.release().await.expect("release odd key");
    }
    for k in &keys {
        assert_free(&b, k, "released odd key is free").await;
    }
}
