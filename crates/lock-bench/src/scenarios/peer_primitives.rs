//! distributed-lock's Redis read-write lock and semaphore, and its PostgreSQL read-write lock
//! (shared advisory locks; it has no PostgreSQL semaphore), in the same mixes as ours
//! (`primitives.rs`): 8 clients, each its own provider (connection or pool), the same holds
//! and exclusion checks, called through the crate's traits as its docs show.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use distributed_lock_core::error::LockError as PeerError;
use distributed_lock_core::traits::{
    DistributedReaderWriterLock, DistributedSemaphore, LockHandle, ReaderWriterLockProvider,
    SemaphoreProvider,
};
use distributed_lock_postgres::PostgresLockProvider;
use distributed_lock_redis::RedisLockProvider;
use tokio::time::Instant;

use super::Ctx;
use super::primitives::{CLIENTS, PERMITS, WRITE_EVERY, hold_permit, rwlock_rows, semaphore_row};
use crate::error::{BenchError, Result};
use crate::micros::{hist, us};
use crate::row::Row;

/// The wait of one acquisition, as in `primitives.rs`.
const WAIT: Duration = Duration::from_secs(30);

/// One provider per client, each made by `connect` (`what` names it in errors).
async fn providers<P, Fut>(connect: impl Fn() -> Fut, what: &'static str) -> Result<Vec<P>>
where
    Fut: std::future::Future<Output = std::result::Result<P, PeerError>>,
{
    let mut out = Vec::with_capacity(CLIENTS);
    for _ in 0..CLIENTS {
        out.push(connect().await.map_err(BenchError::driver(what))?);
    }
    Ok(out)
}

async fn redis_providers(url: &str) -> Result<Vec<RedisLockProvider>> {
    providers(|| RedisLockProvider::new(url), "distributed-lock-redis connect").await
}

/// The semaphore mix on the target's peer: distributed-lock's Redis one, or a row saying the
/// peer has none.
pub async fn semaphore(cx: &Ctx<'_>) -> Result<Vec<Row>> {
    if cx.target.peer == Some(crate::peers::Peer::DistributedLockPostgres) {
        let mut row = Row::new(cx.target, "semaphore", "n/a: distributed-lock-postgres has no semaphore");
        row.extra.insert("skipped".into(), true.into());
        return Ok(vec![row]);
    }
    redis_semaphore(cx).await
}

/// The read-write mix on the target's peer: distributed-lock's Redis or PostgreSQL one.
pub async fn rwlock(cx: &Ctx<'_>) -> Result<Vec<Row>> {
    if cx.target.peer == Some(crate::peers::Peer::DistributedLockPostgres) {
        let url = cx.target.url.as_str();
        let pg = providers(|| PostgresLockProvider::new(url), "distributed-lock-postgres connect").await?;
        return rwlock_of(cx, pg, "distributed-lock-postgres").await;
    }
    rwlock_of(cx, redis_providers(&cx.target.url).await?, "distributed-lock-redis").await
}

/// 8 clients on `create_semaphore(name, 3)`: acquire (its own polling wait), a yield, release.
async fn redis_semaphore(cx: &Ctx<'_>) -> Result<Vec<Row>> {
    let name = cx.key("sem");
    let inside = Arc::new(AtomicUsize::new(0));
    let stop = Instant::now() + cx.sizes.contended_for;
    let mut tasks = Vec::new();
    for p in redis_providers(&cx.target.url).await? {
        let (inside, name) = (inside.clone(), name.clone());
        tasks.push(tokio::spawn(async move {
            let sem = p.create_semaphore(&name, PERMITS);
            let (mut h, mut n) = (hist()?, 0u64);
            while Instant::now() < stop {
                let t0 = Instant::now();
                let held = sem
                    .acquire(Some(WAIT))
                    .await
                    .map_err(BenchError::driver("distributed-lock-redis semaphore"))?;
                h.saturating_record(us(t0.elapsed()));
                n = hold_permit(&inside, n).await?;
                held.release().await.map_err(BenchError::driver("distributed-lock-redis release"))?;
            }
            Ok::<_, BenchError>(h)
        }));
    }
    let started = Instant::now();
    let mut h = hist()?;
    for t in tasks {
        h.add(&t.await??)?;
    }
    let secs = started.elapsed().max(cx.sizes.contended_for).as_secs_f64();
    Ok(vec![semaphore_row(cx.target, &h, secs)])
}

/// Retries `acquire` while it answers `Timeout` before `WAIT` has passed: distributed-lock's
/// read side makes one attempt and gives up at once on a held lock, whatever the wait, so a
/// user has to loop (its write side polls on its own). `None` once `WAIT` has passed: a
/// result of the run (a starved writer), not a failure of the bench.
async fn waited<H, F, Fut>(what: &'static str, mut acquire: F) -> Result<Option<H>>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = std::result::Result<H, PeerError>>,
{
    let started = Instant::now();
    loop {
        match acquire().await {
            Ok(h) => return Ok(Some(h)),
            Err(PeerError::Timeout(_)) if started.elapsed() < WAIT => tokio::task::yield_now().await,
            Err(PeerError::Timeout(_)) => return Ok(None),
            Err(e) => return Err(BenchError::driver(what)(e)),
        }
    }
}

/// 8 clients, one provider each, on `create_reader_writer_lock(name)`, one operation in ten a
/// write; `what` names the peer in errors.
async fn rwlock_of<P>(cx: &Ctx<'_>, providers: Vec<P>, what: &'static str) -> Result<Vec<Row>>
where
    P: ReaderWriterLockProvider + 'static,
    P::Lock: 'static,
{
    let name = cx.key("rw");
    let (readers, writers) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let stop = Instant::now() + cx.sizes.contended_for;
    let mut tasks = Vec::new();
    for (i, p) in providers.into_iter().enumerate() {
        let (readers, writers, name) = (readers.clone(), writers.clone(), name.clone());
        tasks.push(tokio::spawn(async move {
            let rw = p.create_reader_writer_lock(&name);
            let (mut h_read, mut h_write, mut timeouts) = (hist()?, hist()?, 0u64);
            let mut broken = None;
            let mut op = i as u64;
            while Instant::now() < stop {
                op += 1;
                let t0 = Instant::now();
                let write = op.is_multiple_of(WRITE_EVERY);
                let (mine, others) = if write { (&writers, &readers) } else { (&readers, &writers) };
                let release = if write {
                    let Some(g) = waited(what, || rw.acquire_write(Some(WAIT))).await? else {
                        timeouts += 1;
                        continue;
                    };
                    h_write.saturating_record(us(t0.elapsed()));
                    Box::pin(g.release()) as std::pin::Pin<Box<dyn std::future::Future<Output = _> + Send>>
                } else {
                    let Some(g) = waited(what, || rw.acquire_read(Some(WAIT))).await? else {
                        timeouts += 1;
                        continue;
                    };
                    h_read.saturating_record(us(t0.elapsed()));
                    Box::pin(g.release())
                };
                let before = mine.fetch_add(1, Ordering::SeqCst);
                let overlap = others.load(Ordering::SeqCst) > 0 || (write && before > 0);
                tokio::task::yield_now().await;
                mine.fetch_sub(1, Ordering::SeqCst);
                release.await.map_err(BenchError::driver(what))?;
                if overlap {
                    // A result about the peer, reported in its rows; this client stops.
                    broken = Some(h_read.len() + h_write.len());
                    break;
                }
            }
            Ok::<_, BenchError>((h_read, h_write, timeouts, broken))
        }));
    }
    let started = Instant::now();
    let (mut h_read, mut h_write, mut timeouts, mut broken) = (hist()?, hist()?, 0, 0u64);
    for t in tasks {
        let (r, w, n, b) = t.await??;
        h_read.add(&r)?;
        h_write.add(&w)?;
        timeouts += n;
        broken += u64::from(b.is_some());
    }
    let secs = started.elapsed().max(cx.sizes.contended_for).as_secs_f64();
    let mut rows = rwlock_rows(cx.target, (&h_read, &h_write), secs, true);
    for row in &mut rows {
        // Acquisitions that waited out the 30 s wait (a writer starved by the readers).
        row.extra.insert("timeouts".into(), timeouts.into());
        // Clients that saw a writer hold together with another holder (its read checks for a
        // writer, then joins the readers: two round trips a writer can come between).
        row.extra.insert("exclusion_ok".into(), (broken == 0).into());
        row.extra.insert("clients_saw_overlap".into(), broken.into());
    }
    Ok(rows.into())
}
