//! The classic failure, and the fence that stops it: a holder is paused past its lease (a GC
//! pause, a stalled VM), another client takes the lock and writes, and the paused holder wakes
//! and writes too. The lock cannot stop that late write; the resource can, by refusing a fence
//! older than one it has admitted. Here the resource is in-process ([`dlock::fenced::Fenced`]);
//! `dlock::fenced::{postgres, mysql, redis}` keep the same watermark beside your own rows and
//! keys.
//!
//! ```sh
//! cargo run --example fenced_write                                  # in-process memory backend
//! cargo run --example fenced_write --features redis -- redis://127.0.0.1:6379/?mode=simple
//! ```

use std::sync::Arc;
use std::time::Duration;

use dlock::fenced::Fenced;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::args().nth(1).unwrap_or_else(|| "memory://fenced".to_owned());
    let (paused, other) =
        (dlock::Locker::new(dlock::from_url(&url).await?), dlock::Locker::new(dlock::from_url(&url).await?));
    let balance = Arc::new(Fenced::new("account:42", 100_i64));

    // A fixed lease of 300 ms and no watchdog: nothing renews it while the holder is paused.
    let lease = Duration::from_millis(300);
    let stale = paused.lock("account:42").lease(lease).acquire().await?;
    let stale_fence = stale.fence().ok_or("this store gives no fencing token")?;
    println!("holder 1 has the lock, fence {stale_fence}, and pauses");

    // The other client waits the lease out and writes.
    let current = other.lock("account:42").wait(Duration::from_secs(10)).acquire().await?;
    let fence = current.fence().ok_or("this store gives no fencing token")?;
    balance.write(fence, |b| *b -= 30)?;
    println!("holder 2 took the lock with fence {fence} and withdrew 30");

    // Holder 1 wakes, still believing it holds the lock, and writes with its old fence.
    match balance.write(stale_fence, |b| *b -= 30) {
        Ok(()) => return Err("the late write was admitted: the balance is wrong".into()),
        Err(refused) => println!("holder 1's late write: {refused}"),
    }
    println!("balance {} (only holder 2's withdrawal)", balance.read(|b| *b));
    assert_eq!(balance.read(|b| *b), 70);
    current.release().await?;
    Ok(())
}
