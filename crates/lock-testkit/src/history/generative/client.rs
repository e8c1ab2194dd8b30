//! One client of the mutex mix: its loop of random operations (waits and single attempts,
//! nested holds through the same and through another client, renewals, releases, guards
//! dropped unreleased, futures cut off) and what it records of each hold.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use lock_core::{LeaseState, LockError, LockGuard, Locker, OwnerToken};
use tokio::time::Instant;

use super::{Hold, Mix, Shared, WriteOutcome, lease, maybe_cut};

fn note_error(shared: &Shared, e: &LockError) {
    shared.counts.errors.fetch_add(1, Ordering::Relaxed);
    if !e.is_temporary() && !matches!(e, LockError::Timeout { .. } | LockError::LeaseLost { .. }) {
        shared.permanent.lock().push(e.to_string());
    }
}

#[allow(clippy::too_many_arguments)] // one call site, the run's task
pub(super) async fn client(
    c: usize,
    mine: Locker,
    other: Locker,
    key: Arc<str>,
    shared: Arc<Shared>,
    mix: Mix,
    mut rng: fastrand::Rng,
    stop_at: Instant,
) -> (Locker, Locker) {
    let counts = &shared.counts;
    while shared.ops.fetch_add(1, Ordering::Relaxed) < mix.operations && Instant::now() < stop_at {
        let mut req = mine.lock(&*key);
        if let Some(l) = lease(&mut rng, mix.lease) {
            req = req.lease(l);
        }
        let wait = (rng.u8(0..4) != 0).then(|| Duration::from_millis(rng.u64(20..1_000)));
        let attempt = async {
            match wait {
                None => {
                    counts.tries.fetch_add(1, Ordering::Relaxed);
                    req.try_acquire().await
                }
                Some(w) => {
                    counts.waits.fetch_add(1, Ordering::Relaxed);
                    req.wait(w).acquire().await.map(Some)
                }
            }
        };
        let cut_limit = Duration::from_millis(3);
        let invoked = Instant::now();
        let g = match maybe_cut(&mut rng, 10, cut_limit, counts, attempt).await {
            Some(Ok(Some(g))) => g,
            Some(Ok(None)) | None => continue,
            Some(Err(e)) => {
                note_error(&shared, &e);
                continue;
            }
        };
        hold(c, invoked, g, &mine, &other, &key, &shared, &mix, &mut rng).await;
    }
    (mine, other)
}

/// One outer hold: read, a few random steps, write, and a release or a drop.
#[allow(clippy::too_many_arguments)]
async fn hold(
    c: usize,
    invoked: Instant,
    g: LockGuard,
    mine: &Locker,
    other: &Locker,
    key: &str,
    shared: &Shared,
    mix: &Mix,
    rng: &mut fastrand::Rng,
) {
    let counts = &shared.counts;
    let acquired = Instant::now();
    let id = shared.next_hold.fetch_add(1, Ordering::Relaxed);
    let fence = g.fence();
    let read = shared.register.read(id, fence);
    for _ in 0..rng.usize(0..4) {
        match rng.u8(0..4) {
            0 => nest(mine, key, g.owner(), shared, mix, rng, &counts.nested).await,
            1 => nest(other, key, g.owner(), shared, mix, rng, &counts.nested_other).await,
            2 => {
                counts.renewals.fetch_add(1, Ordering::Relaxed);
                let l = mix.lease.mul_f64(1.0 + 2.0 * rng.f64());
                if let Err(e) = g.renew(l).await {
                    note_error(shared, &e);
                }
            }
            _ => tokio::time::sleep(mix.hold_max.mul_f64(rng.f64())).await,
        }
    }
    let believed = !g.is_lost();
    let write = match read {
        Some(v) if believed => Some((Instant::now(), shared.register.increment(id, fence, v))),
        Some(_) => None,
        None => Some((Instant::now(), WriteOutcome::Rejected)),
    };
    let mut unseen = false;
    let lost = if rng.u8(0..10) == 0 {
        // Dropped unreleased: the core releases it in the background.
        counts.drops.fetch_add(1, Ordering::Relaxed);
        let lost = g.is_lost();
        drop(g);
        lost
    } else {
        let was_lost = g.is_lost();
        let held = g.state() == LeaseState::Held;
        let deadline = g.lease_deadline();
        match g.release().await {
            Ok(()) => was_lost,
            Err(LockError::LeaseLost { .. }) => {
                // Answered before the local deadline, which comes before the server's expiry:
                // the server freed a hold its holder still had.
                unseen = held && deadline.is_some_and(|d| Instant::now() < d);
                true
            }
            Err(e) => {
                note_error(shared, &e);
                was_lost
            }
        }
    };
    let released = Instant::now();
    let fence = fence.map(|f| f.0);
    let h = Hold { client: c, invoked, fence, acquired, write, believed, lost, unseen, released };
    shared.holds.lock().push(h);
}

/// A nested acquisition of `owner` through `l` (the holder's client or its other one): a
/// single attempt, maybe cut off, then released or dropped.
async fn nest(
    l: &Locker,
    key: &str,
    owner: OwnerToken,
    shared: &Shared,
    mix: &Mix,
    rng: &mut fastrand::Rng,
    count: &AtomicU64,
) {
    count.fetch_add(1, Ordering::Relaxed);
    let mut req = l.lock(key).owner(owner);
    if let Some(lease) = lease(rng, mix.lease) {
        req = req.lease(lease);
    }
    match maybe_cut(rng, 25, Duration::from_millis(2), &shared.counts, req.try_acquire()).await {
        Some(Ok(Some(n))) if rng.u8(0..4) == 0 => drop(n),
        Some(Ok(Some(n))) => {
            if let Err(e) = n.release().await {
                note_error(shared, &e);
            }
        }
        Some(Err(e)) => note_error(shared, &e),
        Some(Ok(None)) | None => {}
    }
}
