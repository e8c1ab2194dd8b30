//! The seeds' workloads: 10 tasks x N increments of a non-atomic counter, and the flash sale.
//! Only the lock keeps either exact.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use super::Ctx;
use crate::error::{BenchError, Result};
use crate::row::Row;

/// Lease of every lock taken here: long enough never to expire during the run.
const LEASE: Duration = Duration::from_secs(10);

/// How long a client waits for the lock before the run counts as failed.
const WAIT: Duration = Duration::from_secs(60);

/// The flash sale's stock is cut so that selling it at the target's uncontended floor would take
/// about this long: a fixed 100,000 orders took minutes on the slower stores (ZooKeeper's
/// fsync per grant, MySQL's optimistic polling) and the full run grew past half an hour.
const SALE_BUDGET: Duration = Duration::from_secs(3);

/// Both seeds.
pub async fn seeds(cx: &Ctx<'_>) -> Result<Vec<Row>> {
    let increments = increments(cx, cx.sizes.increments).await?;
    let sale = flash_sale(cx, sale_stock(cx)).await?;
    Ok(vec![increments, sale])
}

/// The sale's stock: the run's size, cut to what the floor sells in [`SALE_BUDGET`] (at least
/// 1,000 orders, so the rate is never measured on a handful).
fn sale_stock(cx: &Ctx<'_>) -> (u64, u64) {
    let (sku1, sku2) = cx.sizes.stock;
    let Some(pair) = cx.floor.pair_p50 else { return (sku1, sku2) };
    let affordable = u64::try_from(SALE_BUDGET.as_micros() / u128::from(pair.max(1))).unwrap_or(u64::MAX);
    let n = affordable.clamp(1_000.min(sku1), sku1);
    // Keep the seed's ratio: two of sku2 per order, so both run out together.
    (n, n * sku2 / sku1.max(1))
}

/// Seed: 10 tasks x `n` increments of a non-atomic counter under the lock must end exact.
async fn increments(cx: &Ctx<'_>, n: u64) -> Result<Row> {
    let key = cx.key("inc");
    let counter = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..10 {
        let l = cx.locker().await?;
        let (k, c) = (key.clone(), counter.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..n {
                let g = l.lock(&k).lease(LEASE).wait(WAIT).acquire().await?;
                let v = c.load(Ordering::SeqCst);
                tokio::task::yield_now().await;
                c.store(v + 1, Ordering::SeqCst);
                g.release().await?;
            }
            Ok::<_, BenchError>(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    let got = counter.load(Ordering::SeqCst);
    if got != 10 * n {
        return Err(BenchError::Increments { per_task: n, got });
    }
    let mut row = Row::new(cx.target, &format!("seed 10x{n} increments"), "increments/s");
    row.value = Some(got as f64 / started.elapsed().as_secs_f64());
    row.extra.insert("final".into(), got.into());
    Ok(row)
}

/// Seed 000's flash sale: every order takes 1 of sku1 and 2 of sku2 under the lock until sold
/// out; stock must end at exactly 0 with no oversell.
async fn flash_sale(cx: &Ctx<'_>, stock: (u64, u64)) -> Result<Row> {
    #[derive(Default)]
    struct Stock {
        sku1: AtomicU64,
        sku2: AtomicU64,
    }
    let key = cx.key("sale");
    let s = Arc::new(Stock::default());
    s.sku1.store(stock.0, Ordering::SeqCst);
    s.sku2.store(stock.1, Ordering::SeqCst);
    let orders = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let l = cx.locker().await?;
        let (k, s, orders) = (key.clone(), s.clone(), orders.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let g = l.lock(&k).lease(LEASE).wait(WAIT).acquire().await?;
                // Read, yield, write: only the lock prevents overselling.
                let (a, b) = (s.sku1.load(Ordering::SeqCst), s.sku2.load(Ordering::SeqCst));
                let sold_out = a < 1 || b < 2;
                if !sold_out {
                    tokio::task::yield_now().await;
                    s.sku1.store(a - 1, Ordering::SeqCst);
                    s.sku2.store(b - 2, Ordering::SeqCst);
                    orders.fetch_add(1, Ordering::SeqCst);
                }
                g.release().await?;
                if sold_out {
                    return Ok::<_, BenchError>(());
                }
            }
        }));
    }
    for task in tasks {
        task.await??;
    }
    let (a, b, n) =
        (s.sku1.load(Ordering::SeqCst), s.sku2.load(Ordering::SeqCst), orders.load(Ordering::SeqCst));
    if a != 0 || b != 0 || n != stock.0 {
        return Err(BenchError::FlashSale { sku1: a, sku2: b, orders: n });
    }
    let mut row = Row::new(cx.target, "seed flash sale x8", "orders/s");
    row.value = Some(n as f64 / started.elapsed().as_secs_f64());
    row.extra.insert("orders".into(), n.into());
    row.extra.insert("stock_left".into(), (a + b).into());
    Ok(row)
}
