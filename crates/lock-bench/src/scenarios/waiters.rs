//! The waiters curve: 10, 100 and 1,000 clients blocked on one held key, then released in a
//! chain: how long each release takes to reach the next holder, and how many backend calls an
//! acquisition costs. A herd (every release waking every waiter) shows as calls per
//! acquisition growing with the queue.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dlock::Locker;
use tokio::time::Instant;

use super::Ctx;
use super::counting::Counting;
use crate::error::{BenchError, Result};
use crate::micros::{hist, us};
use crate::row::Row;

/// Backend clients the waiters take in turn: 4 of at most 64 connections (the user's pool and
/// the holders') keep 1,000 waiters within the SQL servers' connection limits (a waiting
/// acquisition may pin a connection).
const BACKENDS: usize = 4;

/// Lease of every hold: never expires during a run.
const LEASE: Duration = Duration::from_secs(60);

/// The longest a waiter waits: 1,000 handoffs on the slowest store stay well within.
const WAIT: Duration = Duration::from_secs(120);

/// How long the waiters may take to make their first attempt.
const QUEUE_UP: Duration = Duration::from_secs(60);

/// Each size of the curve.
pub async fn waiters(cx: &Ctx<'_>) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    for &n in cx.sizes.waiters {
        rows.push(queue(cx, n).await?);
    }
    Ok(rows)
}

/// `n` waiters queue behind a holder, which releases; each then releases as soon as it holds.
async fn queue(cx: &Ctx<'_>, n: usize) -> Result<Row> {
    let key = cx.key("q");
    let mut backends = Vec::new();
    for _ in 0..n.min(BACKENDS) {
        let counting = Counting::new(cx.target.client().await?);
        backends.push((Locker::new(counting.backend()), counting));
    }
    let calls = || backends.iter().map(|(_, c)| (c.attempts(), c.subscribes())).fold((0, 0), add);
    let holder = cx.locker().await?;
    let g = holder.lock(&key).lease(LEASE).try_acquire().await?;
    let g = g.ok_or(BenchError::UnexpectedlyHeld { what: "waiters key" })?;
    let (attempts0, subscribes0) = calls();
    let released = Arc::new(Mutex::new(Instant::now()));
    let counter = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::with_capacity(n);
    for i in 0..n {
        let locker = backends[i % backends.len()].0.clone();
        let (key, released, counter) = (key.clone(), released.clone(), counter.clone());
        tasks.push(tokio::spawn(async move {
            let g = locker.lock(&key).lease(LEASE).wait(WAIT).acquire().await?;
            let took = released.lock().map_or(Duration::ZERO, |r| r.elapsed());
            super::increment(&counter).await;
            if let Ok(mut r) = released.lock() {
                *r = Instant::now();
            }
            g.release().await?;
            Ok::<_, BenchError>(took)
        }));
    }
    // Every waiter has made its first attempt before the holder lets go; the pause lets the
    // last ones subscribe or enter the server's queue.
    let deadline = Instant::now() + QUEUE_UP;
    while calls().0 - attempts0 < n as u64 {
        if Instant::now() > deadline {
            return Err(BenchError::Worker(format!("{n} waiters did not queue up within {QUEUE_UP:?}")));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    let started = Instant::now();
    if let Ok(mut r) = released.lock() {
        *r = started;
    }
    g.release().await?;
    let mut h = hist()?;
    for t in tasks {
        h.saturating_record(us(t.await??));
    }
    let took = started.elapsed();
    let (attempts1, subscribes1) = calls();
    let counted = counter.load(Ordering::SeqCst);
    if counted != n as u64 {
        return Err(BenchError::Exclusion { counter: counted, acquisitions: n as u64 });
    }
    let mut row = Row::latency(cx.target, &format!("waiters x{n}"), "release -> next holder", &h, None, None);
    row.value = Some(n as f64 / took.as_secs_f64().max(f64::EPSILON));
    row.attempts = Some((attempts1 - attempts0) as f64 / n as f64);
    row.extra.insert("subscribes_per_acq".into(), ((subscribes1 - subscribes0) as f64 / n as f64).into());
    row.extra.insert("curve".into(), "waiters".into());
    row.extra.insert("x".into(), n.into());
    Ok(row)
}

fn add(a: (u64, u64), b: (u64, u64)) -> (u64, u64) {
    (a.0 + b.0, a.1 + b.1)
}
