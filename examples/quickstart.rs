//! The README's example: acquire with a wait, use the fencing token, watch the lost signal,
//! release; then the same with a closure.
//!
//! ```sh
//! cargo run --example quickstart                                   # in-process memory backend
//! cargo run --example quickstart --features redis -- redis://127.0.0.1:6379/?mode=simple
//! ```

use std::time::Duration;

#[tokio::main]
async fn main() -> Result<(), dlock::LockError> {
    let url = std::env::args().nth(1).unwrap_or_else(|| "memory://quickstart".to_owned());
    let locker = dlock::Locker::new(dlock::from_url(&url).await?);

    // Wait up to 5 s; no lease given, so the watchdog renews a 30 s lease every 10 s.
    let guard = locker.lock("invoice/42").wait(Duration::from_secs(5)).acquire().await?;
    // Some(token) on fencing backends: pass it to the storage you write to, which refuses
    // writes carrying a token older than the newest it has seen.
    let fence = guard.fence();
    tokio::select! {
        _ = guard.lost() => println!("lease lost: stop writing"),
        _ = async { println!("holding invoice/42 with fencing token {fence:?}") } => {}
    }
    guard.release().await?; // Err(LeaseLost) if the lease was lost meanwhile

    // Or run a closure under the lock: the token it receives is cancelled if the lease is lost.
    let n = locker.with_lock("counter", Duration::from_secs(5), |_lost| async { 41 + 1 }).await?;
    println!("computed {n} under the lock");
    Ok(())
}
