//! The seeds' flash sale: many buyers race for a small stock; each order takes the item's lock,
//! reads the stock, and writes it back one lower. With the lock the stock ends at exactly 0 and
//! no order is oversold; the fencing token of every sale is unique and increasing per write.
//!
//! ```sh
//! cargo run --example flash_sale                                    # in-process memory backend
//! cargo run --example flash_sale --features redis -- redis://127.0.0.1:6379/?mode=simple
//! ```

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use dlock::{FencingToken, LockError, Locker};
use tokio::sync::Mutex;

/// The shop's store: stock per item, and the newest fencing token that wrote it (a write with
/// an older token is refused, so a buyer whose lease ran out cannot overwrite a newer sale).
#[derive(Default)]
struct Store {
    items: Mutex<HashMap<String, (u64, Option<FencingToken>)>>,
}

impl Store {
    async fn read(&self, item: &str) -> u64 {
        self.items.lock().await.get(item).map_or(0, |(stock, _)| *stock)
    }

    async fn write(&self, item: &str, stock: u64, fence: Option<FencingToken>) -> Result<(), &'static str> {
        let mut items = self.items.lock().await;
        let entry = items.entry(item.to_owned()).or_insert((0, None));
        if let (Some(new), Some(seen)) = (fence, entry.1)
            && new <= seen
        {
            return Err("stale fencing token");
        }
        *entry = (stock, fence.or(entry.1));
        Ok(())
    }
}

const STOCK: u64 = 100;
const BUYERS: usize = 20;
const ATTEMPTS_PER_BUYER: usize = 10;

#[tokio::main]
async fn main() -> Result<(), LockError> {
    let url = std::env::args().nth(1).unwrap_or_else(|| "memory://flash-sale".to_owned());
    let store = Arc::new(Store::default());
    let item = format!("sku-{}", std::process::id());
    store.write(&item, STOCK, None).await.expect("initial stock");
    let sold = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut buyers = Vec::new();
    for _ in 0..BUYERS {
        // Each buyer is its own client, as separate processes would be.
        let locker = Locker::new(dlock::from_url(&url).await?);
        let (store, sold, item) = (store.clone(), sold.clone(), item.clone());
        buyers.push(tokio::spawn(async move {
            for _ in 0..ATTEMPTS_PER_BUYER {
                let guard =
                    locker.lock(format!("stock/{item}")).wait(Duration::from_secs(30)).acquire().await?;
                let stock = store.read(&item).await;
                if stock > 0 {
                    tokio::task::yield_now().await; // a read-modify-write only the lock keeps exact
                    store.write(&item, stock - 1, guard.fence()).await.expect("fenced write");
                    sold.fetch_add(1, Ordering::SeqCst);
                }
                guard.release().await?;
            }
            Ok::<_, LockError>(())
        }));
    }
    for b in buyers {
        b.await.expect("buyer task")?;
    }
    let (left, sold) = (store.read(&item).await, sold.load(Ordering::SeqCst));
    println!(
        "sold {sold} of {STOCK} ({} orders tried) in {:?}; stock left {left}",
        BUYERS * ATTEMPTS_PER_BUYER,
        started.elapsed()
    );
    assert_eq!((sold, left), (STOCK, 0), "oversold or undersold");
    Ok(())
}
