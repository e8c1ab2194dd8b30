//! The watchdog's load: K locks held for a few renewal periods, counting the renew round trips
//! that reach the backend and the CPU they cost.

use std::time::Duration;

use dlock::Locker;

use super::Ctx;
use super::counting::Counting;
use crate::error::{BenchError, Result};
use crate::report::Row;

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

/// How many locks to hold: the run's size, within the target's own limit or, without one,
/// within what a session-bound hold may cost.
fn lock_count(cx: &Ctx<'_>) -> usize {
    let wanted = cx.sizes.watchdog_locks;
    match cx.target.watchdog_locks {
        Some(limit) => wanted.min(limit),
        None if cx.caps.session_bound => wanted.min(SESSION_BOUND_LOCKS),
        None => wanted,
    }
}

/// K locks held under the watchdog for a few periods: renew round trips and CPU per period.
pub async fn watchdog(cx: &Ctx<'_>) -> Result<Vec<Row>> {
    if !cx.caps.renew {
        return Err(BenchError::NoRenew);
    }
    let key = cx.key("w");
    let k = lock_count(cx);
    let counting = Counting::new(cx.target.client().await?);
    let l = Locker::new(counting.backend()).with_watchdog_lease(LEASE)?;
    let mut guards = Vec::with_capacity(k);
    for i in 0..k {
        let g = l.try_lock(format!("{key}-{i}")).await?;
        guards.push(g.ok_or(BenchError::UnexpectedlyHeld { what: "fresh key" })?);
    }
    let counts = || {
        let (calls, items) = counting.renewals();
        (calls, items, cpu_time())
    };
    let (c0, i0, cpu0) = counts();
    let periods = cx.sizes.watchdog_periods;
    tokio::time::sleep(LEASE / 3 * periods).await;
    let (c1, i1, cpu1) = counts();
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
    row.extra.insert("lost".into(), lost.into());
    Ok(vec![row])
}
