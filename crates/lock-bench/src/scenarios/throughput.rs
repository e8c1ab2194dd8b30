//! Latency and throughput: one client alone, many clients on one key or on a key each, and the
//! handoff from a releasing holder to a blocked waiter.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use super::{Ctx, hist, us};
use crate::error::{BenchError, Result};
use crate::report::Row;

/// Lease of every lock a scenario takes: long enough never to expire during a measurement.
const LEASE: Duration = Duration::from_secs(10);

/// One client: acquire + release on a free key.
pub async fn uncontended(cx: &Ctx<'_>) -> Result<Vec<Row>> {
    let l = cx.locker().await?;
    let k = cx.key("u");
    let mut h = hist()?;
    let ops = cx.sizes.uncontended_ops;
    let start = Instant::now();
    for _ in 0..ops {
        let t0 = Instant::now();
        let g = l.lock(&k).lease(LEASE).try_acquire().await?;
        let g = g.ok_or(BenchError::UnexpectedlyHeld { what: "uncontended key" })?;
        g.release().await?;
        h.saturating_record(us(t0.elapsed()));
    }
    let rate = ops as f64 / start.elapsed().as_secs_f64();
    Ok(vec![Row::latency(cx.target, "uncontended", "acquire+release", &h, Some(rate), cx.floor.pair_p50)])
}

/// 1, 8 and 32 clients on one key.
pub async fn contended(cx: &Ctx<'_>) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    for clients in [1usize, 8, 32] {
        rows.push(clients_loop(cx, clients, &cx.key("c"), true).await?);
    }
    Ok(rows)
}

/// 8 clients, a key each.
pub async fn many_keys(cx: &Ctx<'_>) -> Result<Vec<Row>> {
    Ok(vec![clients_loop(cx, 8, &cx.key("m"), false).await?])
}

/// N clients, each on its own connection, loop acquire -> non-atomic increment -> release for
/// the run's duration, on one key (`shared`) or on one key each.
async fn clients_loop(cx: &Ctx<'_>, clients: usize, key: &str, shared: bool) -> Result<Row> {
    let counter = Arc::new(AtomicU64::new(0));
    let dur = cx.sizes.contended_for;
    let stop = Instant::now() + dur;
    let mut tasks = Vec::new();
    for i in 0..clients {
        let l = cx.locker().await?;
        let k = if shared { key.to_owned() } else { format!("{key}-{i}") };
        let counter = counter.clone();
        tasks.push(tokio::spawn(async move {
            let mut h = hist()?;
            let mut n = 0u64;
            while Instant::now() < stop {
                let t0 = Instant::now();
                let g = l.lock(&k).lease(LEASE).wait(Duration::from_secs(30)).acquire().await?;
                h.saturating_record(us(t0.elapsed()));
                let v = counter.load(Ordering::SeqCst);
                tokio::task::yield_now().await;
                counter.store(v + 1, Ordering::SeqCst);
                n += 1;
                g.release().await?;
            }
            Ok::<_, BenchError>((h, n))
        }));
    }
    let mut h = hist()?;
    let mut counts = Vec::new();
    let started = Instant::now();
    for task in tasks {
        let (th, n) = task.await??;
        h.add(&th)?;
        counts.push(n);
    }
    let total: u64 = counts.iter().sum();
    let elapsed = started.elapsed().max(dur);
    let counted = counter.load(Ordering::SeqCst);
    if shared && counted != total {
        return Err(BenchError::Exclusion { counter: counted, acquisitions: total });
    }
    let name = if shared { format!("contended x{clients}") } else { format!("many keys x{clients}") };
    let rate = total as f64 / elapsed.as_secs_f64();
    let mut row = Row::latency(cx.target, &name, "acquire wait", &h, Some(rate), cx.floor.pair_p50);
    row.extra.insert("min_per_client".into(), counts.iter().copied().min().unwrap_or(0).into());
    row.extra.insert("max_per_client".into(), counts.iter().copied().max().unwrap_or(0).into());
    row.extra.insert("exclusion_ok".into(), true.into());
    Ok(row)
}

/// Holder releases while a waiter is blocked: time from the release call to the waiter holding.
pub async fn handoff(cx: &Ctx<'_>) -> Result<Vec<Row>> {
    let key = cx.key("h");
    let a = cx.locker().await?;
    let b = cx.locker().await?;
    let mut h = hist()?;
    for _ in 0..cx.sizes.handoffs {
        let g = a.lock(&key).lease(LEASE).wait(LEASE).acquire().await?;
        let (tx, rx) = tokio::sync::oneshot::channel();
        let b2 = b.clone();
        let k = key.clone();
        let waiter = tokio::spawn(async move {
            let r = b2.lock(&k).lease(LEASE).wait(LEASE);
            let _ = tx.send(());
            let g = r.acquire().await;
            (Instant::now(), g)
        });
        let _ = rx.await;
        // Let the waiter make its first attempt and subscribe (or enter the server's queue).
        tokio::time::sleep(Duration::from_millis(5)).await;
        let released = Instant::now();
        g.release().await?;
        let (got, g2) = waiter.await?;
        let g2 = g2?;
        h.saturating_record(us(got.saturating_duration_since(released)));
        g2.release().await?;
    }
    let row = Row::latency(cx.target, "handoff", "release -> waiter holds", &h, None, cx.floor.rtt_p50);
    Ok(vec![row])
}
