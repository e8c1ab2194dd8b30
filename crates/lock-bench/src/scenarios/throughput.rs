//! Latency and throughput: one client alone, many clients on one key or on a key each, and the
//! handoff from a releasing holder to a blocked waiter. The uncontended, contended and handoff
//! scenarios also run on the peer crates' targets.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use hdrhistogram::Histogram;
use tokio::time::Instant;

use super::Ctx;
use super::client::Client;
use crate::alloc::{Allocs, PerOp};
use crate::error::{BenchError, Result};
use crate::micros::{hist, us};
use crate::row::Row;

/// Lease of every lock a scenario takes: long enough never to expire during a measurement.
const LEASE: Duration = Duration::from_secs(10);

/// The wait of the uncontended `acquire()`: what a user typically writes.
const USER_WAIT: Duration = Duration::from_secs(5);

/// The wait of a client in the contended and handoff scenarios.
const WAIT: Duration = Duration::from_secs(30);

/// Uncontended operations before measuring: connections made, scripts loaded, the watchdog
/// started.
const WARMUP: usize = 10;

/// One uncontended figure being collected: latency, wall time and allocations.
struct Measured {
    h: Histogram<u64>,
    busy: Duration,
    allocs: PerOp,
}

impl Measured {
    fn new() -> Result<Self> {
        Ok(Measured { h: hist()?, busy: Duration::ZERO, allocs: PerOp::default() })
    }

    fn row(&self, cx: &Ctx<'_>, scenario: &str, metric: &str) -> Row {
        let rate = self.h.len() as f64 / self.busy.as_secs_f64().max(f64::EPSILON);
        let mut row = Row::latency(cx.target, scenario, metric, &self.h, Some(rate), cx.floor.pair_p50);
        if let Some((calls, bytes)) = self.allocs.mean() {
            row.allocs = Some(calls);
            row.alloc_bytes = Some(bytes);
        }
        row
    }
}

/// Time one operation and count what it allocated.
async fn measure<F, Fut>(m: &mut Measured, op: F) -> Result<()>
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Result<()>>,
{
    let a0 = Allocs::now();
    let t0 = Instant::now();
    op().await?;
    let took = t0.elapsed();
    m.allocs.add(Allocs::now().since(a0));
    m.h.saturating_record(us(took));
    m.busy += took;
    Ok(())
}

/// One client: acquire + release on a free key, two ways taken in turn so that both see the
/// same machine state: `try_acquire` with a fixed lease (the library's cheapest path), and
/// `acquire()` with a wait and the default watchdog lease (what users call). A peer target
/// measures its own acquire with a wait.
pub async fn uncontended(cx: &Ctx<'_>) -> Result<Vec<Row>> {
    let client = cx.client().await?;
    let l = match &client {
        Client::Dlock { locker, .. } => locker,
        #[cfg(feature = "peers")]
        Client::Peer(_) => return uncontended_peer(cx, &client).await,
    };
    let k = &cx.key("u");
    let (mut fixed, mut user) = (Measured::new()?, Measured::new()?);
    let try_once = || async move {
        let g = l.lock(k).lease(LEASE).try_acquire().await?;
        g.ok_or(BenchError::UnexpectedlyHeld { what: "uncontended key" })?.release().await?;
        Ok(())
    };
    let acquire_once = || async move {
        l.lock(k).wait(USER_WAIT).acquire().await?.release().await?;
        Ok(())
    };
    for _ in 0..WARMUP {
        try_once().await?;
        acquire_once().await?;
    }
    let attempts0 = client.attempts();
    for _ in 0..cx.sizes.uncontended_ops {
        measure(&mut fixed, try_once).await?;
        measure(&mut user, acquire_once).await?;
    }
    let ops = 2 * cx.sizes.uncontended_ops as u64;
    let mut fixed_row = fixed.row(cx, "uncontended", "try_acquire+release (lease 10 s)");
    let mut user_row = user.row(cx, "uncontended acquire()", "acquire+release (wait 5 s, watchdog)");
    let per_op = attempts_per(&client, attempts0, ops);
    fixed_row.attempts = per_op;
    user_row.attempts = per_op;
    user_row.vs_try_acquire = match (user_row.p50, fixed_row.p50) {
        (Some(u), Some(f)) if f > 0 => Some(u as f64 / f as f64),
        _ => None,
    };
    Ok(vec![fixed_row, user_row])
}

/// A peer alone on a free key: its acquire with a wait + release.
#[cfg(feature = "peers")]
async fn uncontended_peer(cx: &Ctx<'_>, client: &Client) -> Result<Vec<Row>> {
    let k = &cx.key("u");
    let mut m = Measured::new()?;
    let once = || async move { client.acquire(k, None, USER_WAIT).await?.release().await };
    for _ in 0..WARMUP {
        once().await?;
    }
    for _ in 0..cx.sizes.uncontended_ops {
        measure(&mut m, once).await?;
    }
    Ok(vec![m.row(cx, "uncontended acquire()", "acquire+release (wait 5 s)")])
}

/// `try_acquire` calls per acquisition since `before`, where the client counts them.
fn attempts_per(client: &Client, before: Option<u64>, acquisitions: u64) -> Option<f64> {
    let (now, before) = (client.attempts()?, before?);
    (acquisitions > 0).then(|| now.saturating_sub(before) as f64 / acquisitions as f64)
}

/// 1, 8 and 32 clients on one key.
pub async fn contended(cx: &Ctx<'_>) -> Result<Vec<Row>> {
    if let Some(why) = cx.target.peer.and_then(|p| p.cannot_wait()) {
        return Ok(vec![skipped(cx, "contended", why)]);
    }
    let mut rows = Vec::new();
    for clients in [1usize, 8, 32] {
        rows.push(clients_loop(cx, clients, &cx.key("c"), true).await?);
    }
    // "No worse at 32 than at 8" read off one cell.
    let rate = |i: usize| rows.get(i).and_then(|r: &Row| r.value);
    if let (Some(r8), Some(r32)) = (rate(1), rate(2))
        && r8 > 0.0
    {
        rows[2].extra.insert("rate_vs_x8".into(), (r32 / r8).into());
    }
    Ok(rows)
}

/// 8 clients, a key each.
pub async fn many_keys(cx: &Ctx<'_>) -> Result<Vec<Row>> {
    Ok(vec![clients_loop(cx, 8, &cx.key("m"), false).await?])
}

/// A row saying why a target cannot run a scenario.
fn skipped(cx: &Ctx<'_>, scenario: &str, why: &str) -> Row {
    let mut row = Row::new(cx.target, scenario, &format!("n/a: {why}"));
    row.extra.insert("skipped".into(), true.into());
    row
}

/// N clients, each on its own connection, loop acquire -> non-atomic increment -> release for
/// the run's duration, on one key (`shared`) or on one key each.
async fn clients_loop(cx: &Ctx<'_>, clients: usize, key: &str, shared: bool) -> Result<Row> {
    let counter = Arc::new(AtomicU64::new(0));
    let dur = cx.sizes.contended_for;
    let mut connected = Vec::new();
    for _ in 0..clients {
        connected.push(cx.client().await?);
    }
    let stop = Instant::now() + dur;
    let mut tasks = Vec::new();
    for (i, c) in connected.into_iter().enumerate() {
        let k = if shared { key.to_owned() } else { format!("{key}-{i}") };
        let counter = counter.clone();
        tasks.push(tokio::spawn(async move {
            let mut h = hist()?;
            let mut n = 0u64;
            let (attempts0, subscribes0) = (c.attempts(), c.subscribes());
            while Instant::now() < stop {
                let t0 = Instant::now();
                let g = c.acquire(&k, Some(LEASE), WAIT).await?;
                h.saturating_record(us(t0.elapsed()));
                super::increment(&counter).await;
                n += 1;
                g.release().await?;
            }
            let attempts = c.attempts().zip(attempts0).map(|(a, b)| a.saturating_sub(b));
            let subscribes = c.subscribes().zip(subscribes0).map(|(a, b)| a.saturating_sub(b));
            Ok::<_, BenchError>((h, n, attempts, subscribes))
        }));
    }
    let mut h = hist()?;
    let mut counts = Vec::new();
    let (mut attempts, mut subscribes) = (Some(0u64), Some(0u64));
    let started = Instant::now();
    for task in tasks {
        let (th, n, a, sub) = task.await??;
        h.add(&th)?;
        counts.push(n);
        attempts = attempts.zip(a).map(|(s, a)| s + a);
        subscribes = subscribes.zip(sub).map(|(s, a)| s + a);
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
    row.attempts = attempts.filter(|_| total > 0).map(|a| a as f64 / total as f64);
    if let Some(sub) = subscribes.filter(|_| total > 0) {
        row.extra.insert("subscribes_per_acq".into(), (sub as f64 / total as f64).into());
    }
    row.extra.insert("min_per_client".into(), counts.iter().copied().min().unwrap_or(0).into());
    row.extra.insert("max_per_client".into(), counts.iter().copied().max().unwrap_or(0).into());
    row.extra.insert("exclusion_ok".into(), true.into());
    Ok(row)
}

/// Holder releases while a waiter is blocked: time from the release call to the waiter holding,
/// and the waiter's attempts per handoff.
pub async fn handoff(cx: &Ctx<'_>) -> Result<Vec<Row>> {
    if let Some(why) = cx.target.peer.and_then(|p| p.cannot_wait()) {
        return Ok(vec![skipped(cx, "handoff", why)]);
    }
    let key = cx.key("h");
    let a = cx.client().await?;
    let b = cx.client().await?;
    let mut h = hist()?;
    let (attempts0, subscribes0) = (b.attempts(), b.subscribes());
    for _ in 0..cx.sizes.handoffs {
        let g = a.acquire(&key, Some(LEASE), LEASE).await?;
        let (tx, rx) = tokio::sync::oneshot::channel();
        let b2 = b.clone();
        let k = key.clone();
        let waiter = tokio::spawn(async move {
            let _ = tx.send(());
            let g = b2.acquire(&k, Some(LEASE), LEASE).await;
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
    let mut row = Row::latency(cx.target, "handoff", "release -> waiter holds", &h, None, cx.floor.rtt_p50);
    row.attempts = attempts_per(&b, attempts0, cx.sizes.handoffs as u64);
    if let (Some(now), Some(before)) = (b.subscribes(), subscribes0) {
        let per = now.saturating_sub(before) as f64 / cx.sizes.handoffs.max(1) as f64;
        row.extra.insert("subscribes_per_acq".into(), per.into());
    }
    Ok(vec![row])
}
