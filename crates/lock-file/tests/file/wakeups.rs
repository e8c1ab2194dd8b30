//! Waiters sleep until a holder's lock file closes instead of polling: a waiter on a key held
//! for a second makes a handful of attempts (the first, the one after subscribing, the core's
//! fallback every 500 ms, the one the release wakes), where polling from 2 ms to 100 ms makes
//! more than a dozen.
//!
//! Run: `cargo test -p lock-file --test file wakeups::`.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use lock_core::Locker;
use lock_core::backend::LockBackend;
use lock_core::faults::Op;
use lock_file::FileLock;
use lock_testkit::hooked::hooked;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_wakes_the_waiter_without_polling() {
    let dir = tempfile::Builder::new().prefix("lock-file-wake-").tempdir().expect("temp dir");
    let holder = Locker::new(Arc::new(FileLock::new(dir.path()).expect("holder")));
    // The waiter's backend counts its acquisition attempts.
    let attempts = Arc::new(AtomicUsize::new(0));
    let counted = attempts.clone();
    let waiting = Arc::new(hooked(Arc::new(FileLock::new(dir.path()).expect("waiter")), move |call| {
        if call == Op::TryAcquire {
            counted.fetch_add(1, Ordering::SeqCst);
        }
        Ok(())
    }));
    assert!(waiting.notify().is_some(), "Linux wakes file-lock waiters with inotify");
    let waiter = Locker::new(waiting.clone());
    let g = holder.try_lock("wake").await.expect("try").expect("free");
    let wait = tokio::spawn(async move { waiter.lock("wake").wait(Duration::from_secs(10)).acquire().await });
    tokio::time::sleep(Duration::from_secs(1)).await;
    g.release().await.expect("release");
    let taken = wait.await.expect("waiter task").expect("the waiter takes the released lock");
    taken.release().await.expect("release");
    let attempts = attempts.load(Ordering::SeqCst);
    assert!(attempts <= 6, "{attempts} attempts in a one-second wait: the waiter polled");
}
