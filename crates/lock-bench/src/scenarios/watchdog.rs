//! The watchdog's load: K locks held for a few renewal periods, counting the renew round trips
//! that reach the backend and the CPU they cost.

use std::time::Duration;

use dlock::Locker;

use super::Ctx;
use super::counting::Counting;
use crate::error::{BenchError, Result};
use crate::row::Row;

/// Watchdog lease of the scenario: renewed every third, so a period is 1 s.
const LEASE: Duration = Duration::from_secs(3);

/// Locks held at most when a hold is a session-bound lease, on a target that does not say:
/// such a hold may pin a connection of a bounded pool (MySQL pessimistic: one of 32 each).
const SESSION_BOUND_LOCKS: usize = 24;

/// utime + stime of this process (Linux; zero where `/proc` is missing).
fn cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<u64> = after.split_whitespace().filter_map(|x| x.parse().ok()).collect();
    // After the command name: state (not numeric, skipped) ppid pgrp ...; utime and stime are
    // fields 14 and 15 overall, in clock ticks (100 Hz).
    let ticks = f.get(10).copied().unwrap_or(0) + f.get(11).copied().unwrap_or(0);
    Duration::from_millis(ticks * 10)
}

/// The curve's sizes within the target's own limit or, without one, within what a
/// session-bound hold may cost; a size the limit cuts is measured once.
fn lock_counts(cx: &Ctx<'_>) -> Vec<usize> {
    let limit = match cx.target.watchdog_locks {
        Some(limit) => limit,
        None if cx.caps.session_bound => SESSION_BOUND_LOCKS,
        None => usize::MAX,
    };
    let mut sizes: Vec<usize> = cx.sizes.watchdog_locks.iter().map(|&k| k.min(limit)).collect();
    sizes.dedup();
    sizes
}

/// Acquisitions in flight while the holds are taken: 100k holds one by one would take
/// minutes on the slower stores.
const IN_FLIGHT: usize = 64;

/// K locks held under the watchdog for a few periods, for each K of the curve: renew round
/// trips, CPU and memory per period, and that no hold is lost.
pub async fn watchdog(cx: &Ctx<'_>) -> Result<Vec<Row>> {
    if !cx.caps.renew {
        return Err(BenchError::NoRenew);
    }
    let mut rows = Vec::new();
    for k in lock_counts(cx) {
        rows.push(hold(cx, k).await?);
    }
    Ok(rows)
}

/// `k` locks held under the watchdog for the run's periods.
async fn hold(cx: &Ctx<'_>, k: usize) -> Result<Row> {
    let key = cx.key("w");
    let counting = Counting::new(cx.target.client().await?);
    let l = Locker::new(counting.backend()).with_watchdog_lease(LEASE)?;
    let heap0 = crate::alloc::live_bytes();
    let mut takers = Vec::new();
    for t in 0..IN_FLIGHT.min(k) {
        let (l, key) = (l.clone(), key.clone());
        takers.push(tokio::spawn(async move {
            let mut guards = Vec::new();
            for i in (t..k).step_by(IN_FLIGHT) {
                let g = l.try_lock(format!("{key}-{i}")).await?;
                guards.push(g.ok_or(BenchError::UnexpectedlyHeld { what: "fresh key" })?);
            }
            Ok::<_, BenchError>(guards)
        }));
    }
    let mut guards = Vec::with_capacity(k);
    for t in takers {
        guards.extend(t.await??);
    }
    let counts = || {
        let (calls, items) = counting.renewals();
        (calls, items, cpu_time())
    };
    let (c0, i0, cpu0) = counts();
    let periods = cx.sizes.watchdog_periods;
    tokio::time::sleep(LEASE / 3 * periods).await;
    let (c1, i1, cpu1) = counts();
    let heap1 = crate::alloc::live_bytes();
    let lost = guards.iter().filter(|g| g.is_lost()).count();
    for g in guards {
        let _ = g.release().await;
    }
    if lost > 0 {
        return Err(BenchError::WatchdogLost { lost, held: k });
    }
    let periods = f64::from(periods);
    let mut row = Row::new(cx.target, &format!("watchdog {k} locks"), "renew round trips per period");
    row.value = Some(c1.saturating_sub(c0) as f64 / periods);
    row.extra.insert("renewed_items_per_period".into(), (i1.saturating_sub(i0) as f64 / periods).into());
    row.extra.insert(
        "cpu_ms_per_period".into(),
        (cpu1.saturating_sub(cpu0).as_secs_f64() * 1000.0 / periods).into(),
    );
    // Heap bytes still allocated per hold, the guard and its key included: what a hold costs the
    // process (its resident size moves by the allocator's own steps).
    row.extra.insert("bytes_per_hold".into(), (heap1.saturating_sub(heap0) as f64 / k as f64).into());
    row.extra.insert("lost".into(), lost.into());
    row.extra.insert("curve".into(), "watchdog".into());
    row.extra.insert("x".into(), k.into());
    Ok(row)
}
