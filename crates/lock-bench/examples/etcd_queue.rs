//! Issue 50's point 9: what one read of an etcd lock's queue costs as the queue grows. The
//! recipe's reads (the put's transaction and a waiter's look for its predecessor) are ranges
//! over the lock's prefix sorted by create revision with a limit of one: etcd 3.4 applies the
//! limit after sorting, so every key of the prefix is read. Against a range in key order with
//! the same limit (served from the index's first key), on one private server, data on disk.
//!
//! `cargo run --release -p lock-bench --features etcd --example etcd_queue [samples]`

use std::error::Error;

use dlock::lock_etcd::etcd_client::{Client, GetOptions, SortOrder, SortTarget};
use hdrhistogram::Histogram;
use lock_etcd_testing::EtcdServer;
use tokio::time::Instant;

type Res<T> = Result<T, Box<dyn Error + Send + Sync>>;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Res<()> {
    let samples: u64 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(2000);
    lock_testkit::server::set_durability(lock_testkit::server::Durability::Packaged)
        .map_err(|d| format!("durability already chosen: {d:?}"))?;
    let server = EtcdServer::start()?;
    let mut client = Client::connect([server.endpoint()], None).await?;
    println!("| keys in the queue | sorted by create, limit 1: p50 µs | key order, limit 1: p50 µs |");
    println!("|---|---|---|");
    let mut have = 0;
    for queue in [1usize, 8, 32, 128, 512, 2048] {
        while have < queue {
            client.put(format!("/q/{have:08}"), "", None).await?;
            have += 1;
        }
        let sorted = GetOptions::new()
            .with_prefix()
            .with_sort(SortTarget::Create, SortOrder::Descend)
            .with_limit(1)
            .with_keys_only();
        let ordered = GetOptions::new().with_prefix().with_limit(1).with_keys_only();
        let (mut a, mut b) = (Histogram::<u64>::new(3)?, Histogram::<u64>::new(3)?);
        for _ in 0..samples {
            for (opts, h) in [(sorted.clone(), &mut a), (ordered.clone(), &mut b)] {
                let t = Instant::now();
                client.get("/q/", Some(opts)).await?;
                h.record(t.elapsed().as_micros() as u64)?;
            }
        }
        println!("| {queue} | {} | {} |", a.value_at_quantile(0.5), b.value_at_quantile(0.5));
    }
    Ok(())
}
