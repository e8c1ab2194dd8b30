//! The primitives built on the mutex: read-mostly throughput of the read-write lock, and
//! semaphore throughput, each with N clients for the run's duration (exclusion checked).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use dlock::{Locker, RwLock, Semaphore};
use tokio::time::Instant;

use super::Ctx;
use super::counting::Counting;
use crate::error::{BenchError, Result};
use crate::micros::{hist, us};
use crate::row::Row;

/// Lease of every part: long enough never to expire during a measurement.
const LEASE: Duration = Duration::from_secs(10);
/// The wait of one acquisition.
const WAIT: Duration = Duration::from_secs(30);
/// Clients of each scenario.
pub(crate) const CLIENTS: usize = 8;
/// One operation in this many is a write in the read-mostly mix.
pub(crate) const WRITE_EVERY: u64 = 10;
/// Reader slots of the read-write lock: every client can read at once.
const READER_SLOTS: u32 = 8;
/// Permits of the semaphore: fewer than the clients, so acquisitions wait.
pub(crate) const PERMITS: u32 = 3;

/// What one client counted.
struct Counted {
    reads: u64,
    writes: u64,
    h_read: hdrhistogram::Histogram<u64>,
    h_write: hdrhistogram::Histogram<u64>,
}

/// Most samples of each uncontended measurement of one client alone.
const ALONE_SAMPLES: usize = 1_000;

/// One client alone: backend attempts of one write acquisition (1 for a native read-write lock,
/// the gate and every reader slot for the composite), and a read's `try_acquire` + `release`
/// next to the mutex's on the same client, interleaved, so their ratio reads the read side's
/// own cost. Returns the attempts, whether native, and the two latency rows.
async fn alone(cx: &Ctx<'_>, name: &str) -> Result<(u64, bool, Vec<Row>)> {
    let counting = Counting::new(cx.target.client().await?);
    let locker = Locker::new(counting.backend());
    let rw = RwLock::new(&locker, name)?.with_reader_slots(READER_SLOTS)?;
    let held = || BenchError::UnexpectedlyHeld { what: "read-write lock of one client" };
    let g = rw.write().lease(LEASE).try_acquire().await?.ok_or_else(held)?;
    let attempts = counting.attempts();
    g.release().await?;
    let (mut h_read, mut h_mutex) = (hist()?, hist()?);
    let mutex = format!("{name}-mutex");
    for _ in 0..cx.sizes.uncontended_ops.min(ALONE_SAMPLES) {
        let t0 = Instant::now();
        rw.read().lease(LEASE).try_acquire().await?.ok_or_else(held)?.release().await?;
        h_read.saturating_record(us(t0.elapsed()));
        let t0 = Instant::now();
        locker.lock(mutex.as_str()).lease(LEASE).try_acquire().await?.ok_or_else(held)?.release().await?;
        h_mutex.saturating_record(us(t0.elapsed()));
    }
    let scenario = "rwlock alone (1 client)";
    let mut read = Row::latency(cx.target, scenario, "read try_acquire+release", &h_read, None, None);
    let mutex = Row::latency(cx.target, scenario, "mutex try_acquire+release", &h_mutex, None, None);
    let ratio = h_read.value_at_quantile(0.5) as f64 / h_mutex.value_at_quantile(0.5).max(1) as f64;
    read.extra.insert("x_mutex_p50".into(), ((ratio * 100.0).round() / 100.0).into());
    Ok((attempts, rw.is_native(), vec![read, mutex]))
}

/// 8 clients on one read-write lock (8 reader slots unless native), one operation in ten a
/// write.
pub async fn rwlock(cx: &Ctx<'_>) -> Result<Vec<Row>> {
    let name = cx.key("rw");
    let (attempts, native, mut rows) = alone(cx, &format!("{name}-alone")).await?;
    let (readers, writers) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let mut locks = Vec::new();
    for _ in 0..CLIENTS {
        locks.push(RwLock::new(&cx.locker().await?, name.as_str())?.with_reader_slots(READER_SLOTS)?);
    }
    let stop = Instant::now() + cx.sizes.contended_for;
    let mut tasks = Vec::new();
    for (i, rw) in locks.into_iter().enumerate() {
        let (readers, writers) = (readers.clone(), writers.clone());
        tasks.push(tokio::spawn(async move {
            let mut c = Counted { reads: 0, writes: 0, h_read: hist()?, h_write: hist()? };
            let mut op = i as u64;
            while Instant::now() < stop {
                op += 1;
                let t0 = Instant::now();
                if op.is_multiple_of(WRITE_EVERY) {
                    let g = rw.write().lease(LEASE).wait(WAIT).acquire().await?;
                    c.h_write.saturating_record(us(t0.elapsed()));
                    let overlap =
                        writers.fetch_add(1, Ordering::SeqCst) > 0 || readers.load(Ordering::SeqCst) > 0;
                    tokio::task::yield_now().await;
                    writers.fetch_sub(1, Ordering::SeqCst);
                    if overlap {
                        return Err(BenchError::Exclusion { counter: 0, acquisitions: c.writes + 1 });
                    }
                    c.writes += 1;
                    g.release().await?;
                } else {
                    let g = rw.read().lease(LEASE).wait(WAIT).acquire().await?;
                    c.h_read.saturating_record(us(t0.elapsed()));
                    readers.fetch_add(1, Ordering::SeqCst);
                    let overlap = writers.load(Ordering::SeqCst) > 0;
                    tokio::task::yield_now().await;
                    readers.fetch_sub(1, Ordering::SeqCst);
                    if overlap {
                        return Err(BenchError::Exclusion { counter: 0, acquisitions: c.reads + 1 });
                    }
                    c.reads += 1;
                    g.release().await?;
                }
            }
            Ok::<_, BenchError>(c)
        }));
    }
    let started = Instant::now();
    let (mut h_read, mut h_write) = (hist()?, hist()?);
    for t in tasks {
        let c = t.await??;
        h_read.add(&c.h_read)?;
        h_write.add(&c.h_write)?;
    }
    let secs = started.elapsed().max(cx.sizes.contended_for).as_secs_f64();
    let [r, mut w] = rwlock_rows(cx.target, (&h_read, &h_write), secs, native);
    w.extra.insert("attempts_per_write".into(), attempts.into());
    rows.extend([r, w]);
    Ok(rows)
}

/// The two rows of the read-mostly mix: read and write waits over `secs`.
pub(crate) fn rwlock_rows(
    target: &crate::targets::Target,
    (h_read, h_write): (&hdrhistogram::Histogram<u64>, &hdrhistogram::Histogram<u64>),
    secs: f64,
    native: bool,
) -> [Row; 2] {
    let (reads, writes) = (h_read.len(), h_write.len());
    let scenario = format!("rwlock x{CLIENTS} (1 write in {WRITE_EVERY})");
    let mut r = Row::latency(target, &scenario, "read acquire wait", h_read, Some(reads as f64 / secs), None);
    let mut w =
        Row::latency(target, &scenario, "write acquire wait", h_write, Some(writes as f64 / secs), None);
    for row in [&mut r, &mut w] {
        row.extra.insert("ops_per_s".into(), ((reads + writes) as f64 / secs).into());
        row.extra.insert("exclusion_ok".into(), true.into());
        row.extra.insert("native".into(), native.into());
    }
    [r, w]
}

/// Hold a permit for a yield, counted in `inside`: an error when more than [`PERMITS`] hold at
/// once; `n` acquisitions before this one, so one more after.
pub(crate) async fn hold_permit(inside: &AtomicUsize, n: u64) -> Result<u64> {
    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
    tokio::task::yield_now().await;
    inside.fetch_sub(1, Ordering::SeqCst);
    if now > PERMITS as usize {
        return Err(BenchError::Exclusion { counter: now as u64, acquisitions: n + 1 });
    }
    Ok(n + 1)
}

/// The row of the semaphore scenario: acquire waits over `secs`.
pub(crate) fn semaphore_row(
    target: &crate::targets::Target,
    h: &hdrhistogram::Histogram<u64>,
    secs: f64,
) -> Row {
    let scenario = format!("semaphore x{CLIENTS} ({PERMITS} permits)");
    let mut row = Row::latency(target, &scenario, "acquire wait", h, Some(h.len() as f64 / secs), None);
    row.extra.insert("permits_ok".into(), true.into());
    row
}

/// 8 clients on one semaphore of 3 permits: acquire, hold for a yield, release. Each client's
/// backend is counted: `attempts_per_acq` is the backend attempts (a pool permit, or a slot
/// key's try or wait) per permit granted, what a composite's search across its slots costs.
pub async fn semaphore(cx: &Ctx<'_>) -> Result<Vec<Row>> {
    let name = cx.key("sem");
    let inside = Arc::new(AtomicUsize::new(0));
    let (mut sems, mut counted) = (Vec::new(), Vec::new());
    for _ in 0..CLIENTS {
        let counting = Counting::new(cx.target.client().await?);
        sems.push(Semaphore::new(&Locker::new(counting.backend()), name.as_str(), PERMITS)?);
        counted.push(counting);
    }
    let stop = Instant::now() + cx.sizes.contended_for;
    let mut tasks = Vec::new();
    for s in sems {
        let inside = inside.clone();
        tasks.push(tokio::spawn(async move {
            let (mut h, mut n) = (hist()?, 0u64);
            while Instant::now() < stop {
                let t0 = Instant::now();
                let p = s.acquire().lease(LEASE).wait(WAIT).acquire().await?;
                h.saturating_record(us(t0.elapsed()));
                n = hold_permit(&inside, n).await?;
                p.release().await?;
            }
            Ok::<_, BenchError>((h, n))
        }));
    }
    let started = Instant::now();
    let (mut h, mut granted) = (hist()?, 0u64);
    for t in tasks {
        let (th, n) = t.await??;
        h.add(&th)?;
        granted += n;
    }
    let secs = started.elapsed().max(cx.sizes.contended_for).as_secs_f64();
    let mut row = semaphore_row(cx.target, &h, secs);
    let attempts: u64 = counted.iter().map(|c| c.attempts()).sum();
    let per = (attempts as f64 / granted.max(1) as f64 * 100.0).round() / 100.0;
    row.extra.insert("attempts_per_acq".into(), per.into());
    Ok(vec![row])
}
