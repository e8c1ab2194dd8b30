//! A leader-style job runner: several workers compete for one job's lock; whoever holds it runs
//! the job until done, and stops at once if the lock is lost (the lost signal), so two workers
//! never run the job at the same time. A worker that loses or finishes gives the lock up, and
//! the next waiting worker takes over.
//!
//! ```sh
//! cargo run --example job_runner                                    # in-process memory backend
//! cargo run --example job_runner --features zk -- zk://127.0.0.1:2181/dlock-examples
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use dlock::{LockError, Locker};

const WORKERS: usize = 3;
const BATCHES: usize = 5;

/// One batch of the job; returns early if `lost` fires (the lock is no longer ours).
async fn run_batch(worker: usize, batch: usize, lost: &dlock::CancellationToken) -> bool {
    tokio::select! {
        _ = lost.cancelled() => {
            println!("worker {worker}: lost the lock in batch {batch}; stopping");
            false
        }
        _ = tokio::time::sleep(Duration::from_millis(20)) => true,
    }
}

#[tokio::main]
async fn main() -> Result<(), LockError> {
    let url = std::env::args().nth(1).unwrap_or_else(|| "memory://job-runner".to_owned());
    let running = Arc::new(AtomicUsize::new(0));
    let mut workers = Vec::new();
    for worker in 0..WORKERS {
        let locker = Locker::new(dlock::from_url(&url).await?);
        let running = running.clone();
        workers.push(tokio::spawn(async move {
            // No lease given: the watchdog keeps the lock while the worker runs.
            let guard = locker.lock("jobs/nightly-report").wait(Duration::from_secs(30)).acquire().await?;
            assert_eq!(running.fetch_add(1, Ordering::SeqCst), 0, "two workers ran the job at once");
            println!("worker {worker}: leading with fencing token {:?}", guard.fence());
            let lost = guard.lost_token();
            for batch in 0..BATCHES {
                if !run_batch(worker, batch, &lost).await {
                    break;
                }
            }
            running.fetch_sub(1, Ordering::SeqCst);
            guard.release().await
        }));
    }
    for w in workers {
        w.await.expect("worker task")?;
    }
    println!("every worker ran the job in turn, never two at once");
    Ok(())
}
