//! The operations of the primitives schedules: single permits and several at once on the
//! semaphore; reads, writes and upgradeable reads (upgraded or not) on the read-write lock.

use std::sync::atomic::Ordering;
use std::time::Duration;

use lock_core::{LockError, Permit, Permits, ReadGuard, RwLock, Semaphore, UpgradeableReadGuard, WriteGuard};
use tokio::time::Instant;

use super::super::{Mix, maybe_cut};
use super::{Ask, PERMITS, READ, State, UPGRADE, WRITE};

/// The attempt of a request (the semaphore's, or either side of the read-write lock's: their
/// builders share these methods but no trait) as `ask` says; `$try`/`$wait` name the calls.
macro_rules! attempt {
    ($request:expr, $ask:expr) => {
        attempt!($request, $ask, try_acquire(), acquire())
    };
    ($request:expr, $ask:expr, $try:ident($($a:expr)?), $wait:ident($($b:expr)?)) => {{
        let ask: Ask = $ask;
        let req = match ask.lease {
            Some(l) => $request.lease(l),
            None => $request,
        };
        async move {
            if ask.once { req.$try($($a)?).await } else { req.wait(ask.wait).$wait($($b)?).await.map(Some) }
        }
    }};
}

/// One permit: taken, its slot's register read and written with its fence, maybe renewed,
/// then released or dropped.
pub(super) async fn permit(sem: &Semaphore, state: &State, mix: &Mix, rng: &mut fastrand::Rng, ask: Ask) {
    let invoked = Instant::now();
    let Some(p) = granted(rng, state, Side::Read, ask, attempt!(sem.acquire(), ask)).await else { return };
    state.enter(false);
    state.granted(p.slot() as usize, invoked, p.fence());
    let reg = &state.registers[p.slot() as usize];
    let id = state.next_hold.fetch_add(1, Ordering::Relaxed);
    let read = reg.read(id, p.fence());
    if rng.bool() {
        let _ = p.renew(mix.lease.mul_f64(1.0 + rng.f64())).await;
    }
    tokio::time::sleep(mix.hold_max.mul_f64(rng.f64())).await;
    if let (Some(v), false) = (read, p.is_lost()) {
        reg.increment(id, p.fence(), v);
    }
    state.leave(false);
    end(rng, state, p, Permit::release).await;
}

/// Two permits or all of them in one request (all or none): each counted as a holder, each
/// slot's register read and written with that permit's fence.
pub(super) async fn permits(sem: &Semaphore, state: &State, mix: &Mix, rng: &mut fastrand::Rng, ask: Ask) {
    let n = rng.u32(2..=PERMITS);
    let invoked = Instant::now();
    let many = attempt!(sem.acquire(), ask, try_acquire_many(n), acquire_many(n));
    let Some(ps) = granted(rng, state, Side::Read, ask, many).await else { return };
    state.many.fetch_add(1, Ordering::Relaxed);
    let mut held = Vec::with_capacity(ps.len());
    for p in ps.permits() {
        state.enter(false);
        state.granted(p.slot() as usize, invoked, p.fence());
        let (reg, id) =
            (&state.registers[p.slot() as usize], state.next_hold.fetch_add(1, Ordering::Relaxed));
        held.push((reg, id, p.fence(), reg.read(id, p.fence())));
    }
    tokio::time::sleep(mix.hold_max.mul_f64(rng.f64())).await;
    let lost = ps.is_lost();
    for (reg, id, fence, read) in held {
        if let (Some(v), false) = (read, lost) {
            reg.increment(id, fence, v);
        }
        state.leave(false);
    }
    end(rng, state, ps, Permits::release).await;
}

/// One operation of the read-write lock: a write one time in four (always for a `writer`),
/// an upgradeable read one in six where the store can upgrade, else a read.
pub(super) async fn rw_op(
    rw: &RwLock,
    state: &State,
    mix: &Mix,
    rng: &mut fastrand::Rng,
    ask: Ask,
    writer: bool,
) {
    let nap = mix.hold_max.mul_f64(rng.f64());
    let pick = rng.u8(0..12);
    if pick < 3 || writer {
        let invoked = Instant::now();
        let Some(w) = granted(rng, state, Side::Write, ask, attempt!(rw.write(), ask)).await else { return };
        state.enter(true);
        state.granted(0, invoked, w.fence());
        write_register(state, w.fence(), nap, || w.is_lost()).await;
        state.leave(true);
        end(rng, state, w, WriteGuard::release).await;
    } else if pick < 5 && !state.no_upgrade.load(Ordering::Relaxed) {
        upgradeable(rw, state, rng, ask, nap).await;
    } else {
        let Some(r) = granted(rng, state, Side::Read, ask, attempt!(rw.read(), ask)).await else { return };
        state.enter(false);
        tokio::time::sleep(nap).await;
        state.leave(false);
        end(rng, state, r, ReadGuard::release).await;
    }
}

/// The writers' register read, a nap, and the write unless the hold is known lost.
async fn write_register(
    state: &State,
    fence: Option<lock_core::FencingToken>,
    nap: Duration,
    lost: impl Fn() -> bool,
) {
    let (reg, id) = (&state.registers[0], state.next_hold.fetch_add(1, Ordering::Relaxed));
    let read = reg.read(id, fence);
    tokio::time::sleep(nap).await;
    if let (Some(v), false) = (read, lost()) {
        reg.increment(id, fence, v);
    }
}

/// An upgradeable read: held as a reader, then, two times in three, upgraded (waiting or a
/// single try) and used as the writer. A store without upgrades says so once and the schedule
/// stops asking.
async fn upgradeable(rw: &RwLock, state: &State, rng: &mut fastrand::Rng, ask: Ask, nap: Duration) {
    let attempt = attempt!(rw.upgradeable_read(), ask);
    let Some(mut u) = granted(rng, state, Side::Upgradeable, ask, attempt).await else { return };
    state.enter(false);
    if rng.u8(0..3) != 0 {
        let invoked = Instant::now();
        let up = if rng.bool() {
            u.try_upgrade().await
        } else {
            state.waits[UPGRADE].fetch_add(1, Ordering::Relaxed);
            u.upgrade(ask.wait).await.map(|()| true)
        };
        match up {
            Ok(true) => {
                state.upgrades.fetch_add(1, Ordering::Relaxed);
                state.upgrade();
                state.granted(0, invoked, u.fence());
                write_register(state, u.fence(), nap, || u.is_lost()).await;
            }
            Ok(false) => {}
            Err(e) => {
                if matches!(e, LockError::Timeout { .. }) {
                    state.timeouts[UPGRADE].fetch_add(1, Ordering::Relaxed);
                }
                state.error(&e)
            }
        }
    } else {
        tokio::time::sleep(nap).await;
    }
    state.leave(u.is_upgraded());
    end(rng, state, u, UpgradeableReadGuard::release).await;
}

/// What an attempt asks for: its waits and timeouts are counted with the reads (an
/// upgradeable read waits for writers as a read does) or the writes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    Read,
    Write,
    Upgradeable,
}

impl Side {
    fn index(self) -> usize {
        match self {
            Side::Read | Side::Upgradeable => READ,
            Side::Write => WRITE,
        }
    }
}

/// The outcome of one attempt on `side`, cut off one time in ten: the hold (counted), or
/// nothing when it was refused, cut off or failed (the error noted; a wait that timed out
/// counted against its side). A store refusing upgradeable reads as unsupported is no longer
/// asked for them.
async fn granted<G>(
    rng: &mut fastrand::Rng,
    state: &State,
    side: Side,
    ask: Ask,
    attempt: impl Future<Output = Result<Option<G>, LockError>>,
) -> Option<G> {
    let outcome = maybe_cut(rng, 10, Duration::from_millis(3), &Default::default(), attempt).await;
    if !ask.once && outcome.is_some() {
        state.waits[side.index()].fetch_add(1, Ordering::Relaxed);
    }
    match outcome {
        Some(Ok(Some(hold))) => {
            state.acquisitions.fetch_add(1, Ordering::Relaxed);
            Some(hold)
        }
        Some(Err(LockError::Unsupported { .. })) if side == Side::Upgradeable => {
            state.no_upgrade.store(true, Ordering::Relaxed);
            None
        }
        Some(Err(e)) => {
            if matches!(e, LockError::Timeout { .. }) {
                state.timeouts[side.index()].fetch_add(1, Ordering::Relaxed);
            }
            state.error(&e);
            None
        }
        _ => None,
    }
}

/// Ends a hold: released, or one time in ten dropped unreleased (released in the background).
async fn end<G, Fut>(rng: &mut fastrand::Rng, state: &State, guard: G, release: impl FnOnce(G) -> Fut)
where
    Fut: Future<Output = Result<(), LockError>>,
{
    if rng.u8(0..10) == 0 {
        drop(guard);
    } else if let Err(e) = release(guard).await {
        state.error(&e);
    }
}
