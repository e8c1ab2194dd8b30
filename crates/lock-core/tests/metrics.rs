//! The metrics the core emits, by name and labels, through a recorder that keeps what it is
//! given. One test: the recorder is process-global, and parallel cases would mix their counts.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use lock_core::observe::{
    ACQUIRE_TOTAL, ACQUIRE_WAIT_SECONDS, HELD, HOLD_SECONDS, LOST_TOTAL, RELEASE_TOTAL, RENEW_TOTAL, WAITING,
};
use lock_core::{LockError, Locker, MemoryBackend};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};

/// What was recorded since the last call: `"name{label=value,...}"` -> counter / gauge delta /
/// number of histogram samples.
fn take(snapshotter: &Snapshotter) -> BTreeMap<String, f64> {
    let mut seen = BTreeMap::new();
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let key = key.key();
        let mut labels: Vec<String> = key.labels().map(|l| format!("{}={}", l.key(), l.value())).collect();
        labels.sort();
        let name = format!("{}{{{}}}", key.name(), labels.join(","));
        let value = match value {
            DebugValue::Counter(n) => n as f64,
            DebugValue::Gauge(g) => g.into_inner(),
            DebugValue::Histogram(samples) => samples.len() as f64,
        };
        if value != 0.0 {
            seen.insert(name, value);
        }
    }
    seen
}

fn expect(seen: &BTreeMap<String, f64>, name: &str, labels: &str, value: f64) {
    let full = format!("{name}{{{labels}}}");
    assert_eq!(seen.get(&full).copied(), Some(value), "{full} in {seen:#?}");
}

#[tokio::test]
async fn names_and_labels_of_every_metric() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder.install().expect("the only recorder of this test binary");
    let backend = Arc::new(MemoryBackend::new());
    let a = Locker::new(backend.clone());
    let b = Locker::new(backend);

    // Acquired (with a wait), busy (try), timeout (wait ran out).
    let guard = a.lock("m/1").wait(Duration::from_secs(1)).acquire().await.expect("free key");
    assert!(b.try_lock("m/1").await.expect("answer").is_none());
    let timed_out = b.lock("m/1").wait(Duration::from_millis(30)).acquire().await;
    assert!(matches!(timed_out, Err(LockError::Timeout { .. })), "{timed_out:?}");
    let seen = take(&snapshotter);
    expect(&seen, ACQUIRE_TOTAL, "backend=memory,outcome=acquired", 1.0);
    expect(&seen, ACQUIRE_TOTAL, "backend=memory,outcome=busy", 1.0);
    expect(&seen, ACQUIRE_TOTAL, "backend=memory,outcome=timeout", 1.0);
    expect(&seen, ACQUIRE_WAIT_SECONDS, "backend=memory,outcome=acquired", 1.0);
    expect(&seen, ACQUIRE_WAIT_SECONDS, "backend=memory,outcome=timeout", 1.0);
    expect(&seen, HELD, "backend=memory", 1.0);

    // A renewal by hand, then a release.
    guard.renew(Duration::from_secs(5)).await.expect("still the holder");
    guard.release().await.expect("release");
    let seen = take(&snapshotter);
    expect(&seen, RENEW_TOTAL, "backend=memory,outcome=renewed", 1.0);
    expect(&seen, RELEASE_TOTAL, "backend=memory,outcome=released", 1.0);
    expect(&seen, HOLD_SECONDS, "backend=memory,end=released", 1.0);
    expect(&seen, HELD, "backend=memory", -1.0);

    // A fixed lease runs out and another client takes the key: the local deadline (before the
    // server's) marks the hold lost, so neither the renewal nor the release is sent.
    let stale =
        a.lock("m/2").lease(Duration::from_millis(100)).try_acquire().await.expect("answer").expect("free");
    let next = b.lock("m/2").wait(Duration::from_secs(5)).acquire().await.expect("after the lease");
    let renewed = stale.renew(Duration::from_secs(1)).await;
    assert!(matches!(renewed, Err(LockError::LeaseLost { .. })), "{renewed:?}");
    assert!(matches!(stale.release().await, Err(LockError::LeaseLost { .. })));
    let seen = take(&snapshotter);
    expect(&seen, LOST_TOTAL, "backend=memory,reason=deadline_passed", 1.0);
    assert!(!seen.keys().any(|k| k.starts_with(RENEW_TOTAL)), "{seen:#?}");
    expect(&seen, HOLD_SECONDS, "backend=memory,end=lost", 1.0);
    expect(&seen, HELD, "backend=memory", 1.0); // `next` is still held
    assert_eq!(seen.get(&format!("{RELEASE_TOTAL}{{backend=memory,outcome=released}}")), None, "{seen:#?}");

    // A dropped guard is released in the background (the next acquisition proves it), and an
    // abandoned one is left to its lease.
    drop(next);
    let after_drop = a.lock("m/2").wait(Duration::from_secs(5)).acquire().await.expect("released by drop");
    after_drop.abandon();
    let seen = take(&snapshotter);
    expect(&seen, HOLD_SECONDS, "backend=memory,end=dropped", 1.0);
    expect(&seen, HOLD_SECONDS, "backend=memory,end=abandoned", 1.0);
    expect(&seen, RELEASE_TOTAL, "backend=memory,outcome=released", 1.0);
    // The gauge went up by one per grant and down by one per end: `next` ended here, `stale`
    // and the first guard before, and `after_drop` came and went.
    expect(&seen, HELD, "backend=memory", -1.0);

    // A waiter counts in WAITING while it waits, and not once it holds.
    let holder = a.try_lock("m/3").await.expect("answer").expect("free");
    let waiter = tokio::spawn(async move { b.lock("m/3").wait(Duration::from_secs(10)).acquire().await });
    let label = format!("{WAITING}{{backend=memory}}");
    let mut waiting = 0.0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while waiting != 1.0 {
        assert!(tokio::time::Instant::now() < deadline, "the waiter never counted as waiting");
        tokio::task::yield_now().await;
        waiting += take(&snapshotter).get(&label).copied().unwrap_or(0.0);
    }
    holder.release().await.expect("release");
    let got = waiter.await.expect("task").expect("the waiter gets the key");
    got.release().await.expect("release");
    let seen = take(&snapshotter);
    expect(&seen, WAITING, "backend=memory", -1.0);
}
