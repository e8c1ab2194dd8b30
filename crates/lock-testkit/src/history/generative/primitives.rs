//! The generative schedules of the primitives built on the mutex: a semaphore and a
//! read-write lock, each client mixing waits and single attempts, random leases, renewals,
//! releases, drops and cut-off futures, with readers and writers mixed.
//!
//! Checks: a semaphore never has more than its permits held at once, and a writer is alone (no
//! reader or other writer holds at the same time), both without faults; no permit slot's
//! fenced register (and the writers') sees a lost update or a repeated token; and afterwards a fresh client takes every permit, and the write side, within the
//! mix's bound (nothing the mix left behind wedges a slot).

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use lock_core::{LockError, Permit, ReadGuard, RwLock, Semaphore, WriteGuard};
use tokio::time::Instant;

use super::{Mix, Nemesis, lease, locker, maybe_cut};
use crate::Factory;
use crate::history::Register;
use crate::history::strike_until;

/// Permits of the semaphore schedule.
const PERMITS: u32 = 3;
/// Reader slots of the read-write schedule.
const READERS: u32 = 4;

/// What a primitives run found.
#[derive(Clone, Debug, Default)]
pub struct PrimitivesReport {
    /// Backend, primitive and fault.
    pub label: String,
    /// The seed to rerun it with.
    pub seed: u64,
    /// Operations run, and acquisitions among them.
    pub operations: u64,
    /// Permits or read/write locks acquired.
    pub acquisitions: u64,
    /// Most holders that believed they held at once (at most the permits, or one writer).
    pub most_at_once: usize,
    /// A native read-write lock: readers are not limited to the reader slots.
    pub unbounded_readers: bool,
    /// Times a writer overlapped anyone else, or a reader a writer (must be 0).
    pub conflicts: u64,
    /// Lost updates and non-increasing tokens on the permit slots' registers (must be 0).
    pub register_faults: u64,
    /// Permanent errors (must be none).
    pub permanent: Vec<String>,
    /// How long a fresh client took to get every permit or the write side (`None`: never).
    pub liveness: Option<Duration>,
    /// Nemesis strikes.
    pub strikes: usize,
}

impl fmt::Display for PrimitivesReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "[{} seed={}] {} operations, {} acquisitions ({} strikes): most at once {}, conflicts {}, \
             register faults {}, permanent errors {}, all free again after {:?}",
            self.label,
            self.seed,
            self.operations,
            self.acquisitions,
            self.strikes,
            self.most_at_once,
            self.conflicts,
            self.register_faults,
            self.permanent.len(),
            self.liveness,
        )
    }
}

impl PrimitivesReport {
    /// Panic unless the run was safe and live. The count of holders at once is checked only
    /// without faults: under a fault a holder told of its loss still counts until it leaves,
    /// which races with the next holder's entry; the fenced registers check exclusion then.
    pub fn assert_ok(&self, limit: usize) {
        let rerun = format!("{self}\nrerun with DLOCK_HISTORY_SEED={}", self.seed);
        assert!(self.acquisitions > 0, "nothing acquired: {rerun}");
        assert!(self.permanent.is_empty(), "permanent errors {:?}: {rerun}", self.permanent);
        assert_eq!(self.register_faults, 0, "{rerun}");
        if self.strikes == 0 {
            let limit = if self.unbounded_readers { usize::MAX } else { limit };
            assert!(self.most_at_once <= limit, "more holders than allowed: {rerun}");
            assert_eq!(self.conflicts, 0, "a writer was not alone: {rerun}");
        }
        assert!(self.liveness.is_some(), "a slot stayed blocked after the run: {rerun}");
    }
}

#[derive(Default)]
struct State {
    registers: Vec<Register>,
    /// Holders that believe they hold (readers, or permits).
    holders: AtomicUsize,
    writers: AtomicUsize,
    most: AtomicUsize,
    conflicts: AtomicU64,
    ops: AtomicU64,
    acquisitions: AtomicU64,
    next_hold: AtomicU64,
    permanent: lock_core::backend::Mutex<Vec<String>>,
}

impl State {
    fn enter(&self, writer: bool) {
        let others = self.holders.fetch_add(1, Ordering::SeqCst);
        let writers = if writer {
            self.writers.fetch_add(1, Ordering::SeqCst) + 1
        } else {
            self.writers.load(Ordering::SeqCst)
        };
        if (writer && others > 0) || (!writer && writers > 0) {
            self.conflicts.fetch_add(1, Ordering::SeqCst);
        }
        self.most.fetch_max(others + 1, Ordering::SeqCst);
    }

    fn leave(&self, writer: bool) {
        self.holders.fetch_sub(1, Ordering::SeqCst);
        if writer {
            self.writers.fetch_sub(1, Ordering::SeqCst);
        }
    }

    fn error(&self, e: &LockError) {
        if !e.is_temporary() && !matches!(e, LockError::Timeout { .. } | LockError::LeaseLost { .. }) {
            self.permanent.lock().push(e.to_string());
        }
    }
}

/// Which primitive a schedule drives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Primitive {
    /// A semaphore of 3 permits.
    Semaphore,
    /// A read-write lock of 4 reader slots, one operation in four a write.
    RwLock,
}

/// Run `mix` as a `primitive` schedule on `factory`'s clients with `seed` while `nemesis`
/// strikes.
pub async fn run_primitive<F: Factory + ?Sized>(
    factory: &F,
    primitive: Primitive,
    mix: &Mix,
    nemesis: Option<&dyn Nemesis>,
    seed: u64,
) -> PrimitivesReport {
    let name = crate::key(match primitive {
        Primitive::Semaphore => "gen-sem",
        Primitive::RwLock => "gen-rw",
    });
    let state = Arc::new(State {
        registers: (0..PERMITS.max(READERS)).map(|_| Register::default()).collect(),
        ..State::default()
    });
    let started = Instant::now();
    let stop_at = started + mix.max_time;
    let mut tasks = Vec::new();
    for c in 0..mix.clients * 2 {
        let l = locker(factory, mix.lease).await;
        let mut rng = fastrand::Rng::with_seed(seed ^ (c as u64 + 101).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let (state, mix, name) = (state.clone(), mix.clone(), name.clone());
        let sem = Semaphore::new(&l, &*name, PERMITS).expect("semaphore");
        let rw = RwLock::new(&l, &*name).expect("rwlock").with_reader_slots(READERS).expect("slots");
        tasks.push(tokio::spawn(async move {
            while state.ops.fetch_add(1, Ordering::Relaxed) < mix.operations && Instant::now() < stop_at {
                let ask = Ask {
                    lease: lease(&mut rng, mix.lease),
                    wait: Duration::from_millis(rng.u64(20..1_000)),
                    once: rng.u8(0..4) == 0,
                };
                match primitive {
                    Primitive::Semaphore => permit(&sem, &state, &mix, &mut rng, ask).await,
                    Primitive::RwLock => rw_op(&rw, &state, &mix, &mut rng, ask).await,
                }
            }
            l
        }));
    }
    let nemesis_done = strike_until(nemesis, mix.fault_period, stop_at, || {
        state.ops.load(Ordering::Relaxed) >= mix.operations
    });
    let all = async {
        let mut alive = Vec::new();
        for t in tasks {
            alive.push(t.await.expect("a client of the primitives mix panicked"));
        }
        alive
    };
    // The clients stay alive until the liveness check (see `run`).
    let (strikes, _alive) = tokio::join!(nemesis_done, all);
    let label =
        format!("{} {primitive:?} / {}", factory.label(), nemesis.map_or("no faults".into(), |n| n.name()));
    let liveness = all_free_again(factory, primitive, &name, mix).await;
    let native = RwLock::new(&locker(factory, mix.lease).await, &*name).expect("rwlock").is_native();
    let register_faults = state.registers.iter().map(|r| {
        let st = r.state.lock();
        st.lost_updates + st.non_increasing
    });
    PrimitivesReport {
        label,
        seed,
        operations: state.ops.load(Ordering::Relaxed),
        acquisitions: state.acquisitions.load(Ordering::Relaxed),
        most_at_once: state.most.load(Ordering::Relaxed),
        unbounded_readers: primitive == Primitive::RwLock && native,
        conflicts: state.conflicts.load(Ordering::Relaxed),
        register_faults: register_faults.sum(),
        permanent: state.permanent.lock().clone(),
        liveness,
        strikes,
    }
}

/// How one operation asks for its hold.
#[derive(Clone, Copy)]
struct Ask {
    /// The lease, when not the default.
    lease: Option<Duration>,
    /// How long it waits, unless `once`.
    wait: Duration,
    /// A single try instead of a wait.
    once: bool,
}

/// The attempt of a request (the semaphore's, or either side of the read-write lock's: their
/// builders share these methods but no trait) as `ask` says.
macro_rules! attempt {
    ($request:expr, $ask:expr) => {{
        let ask: Ask = $ask;
        let req = match ask.lease {
            Some(l) => $request.lease(l),
            None => $request,
        };
        async move {
            if ask.once { req.try_acquire().await } else { req.wait(ask.wait).acquire().await.map(Some) }
        }
    }};
}

/// One permit: taken, its slot's register read and written with its fence, maybe renewed,
/// then released or dropped.
async fn permit(sem: &Semaphore, state: &State, mix: &Mix, rng: &mut fastrand::Rng, ask: Ask) {
    let Some(p) = granted(rng, state, attempt!(sem.acquire(), ask)).await else { return };
    state.enter(false);
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

/// One read or write (one in four) of the read-write lock.
async fn rw_op(rw: &RwLock, state: &State, mix: &Mix, rng: &mut fastrand::Rng, ask: Ask) {
    let nap = mix.hold_max.mul_f64(rng.f64());
    if rng.u8(0..4) == 0 {
        let Some(w) = granted(rng, state, attempt!(rw.write(), ask)).await else { return };
        state.enter(true);
        let (reg, id) = (&state.registers[0], state.next_hold.fetch_add(1, Ordering::Relaxed));
        let read = reg.read(id, w.fence());
        tokio::time::sleep(nap).await;
        if let (Some(v), false) = (read, w.is_lost()) {
            reg.increment(id, w.fence(), v);
        }
        state.leave(true);
        end(rng, state, w, WriteGuard::release).await;
    } else {
        let Some(r) = granted(rng, state, attempt!(rw.read(), ask)).await else { return };
        state.enter(false);
        tokio::time::sleep(nap).await;
        state.leave(false);
        end(rng, state, r, ReadGuard::release).await;
    }
}

/// The outcome of one attempt, cut off one time in ten: the hold (counted), or nothing when it
/// was refused, cut off or failed (the error noted).
async fn granted<G>(
    rng: &mut fastrand::Rng,
    state: &State,
    attempt: impl Future<Output = Result<Option<G>, LockError>>,
) -> Option<G> {
    let counts = super::Counts::default();
    match maybe_cut(rng, 10, Duration::from_millis(3), &counts, attempt).await {
        Some(Ok(Some(hold))) => {
            state.acquisitions.fetch_add(1, Ordering::Relaxed);
            Some(hold)
        }
        Some(Err(e)) => {
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

/// How long a fresh client takes to hold every permit at once, or the write side.
async fn all_free_again<F: Factory + ?Sized>(
    factory: &F,
    primitive: Primitive,
    name: &str,
    mix: &Mix,
) -> Option<Duration> {
    let l = locker(factory, mix.lease).await;
    let started = Instant::now();
    while started.elapsed() < mix.liveness {
        let left = mix.liveness.saturating_sub(started.elapsed());
        let got = match primitive {
            Primitive::Semaphore => {
                let sem = Semaphore::new(&l, name, PERMITS).expect("semaphore");
                let mut permits = Vec::new();
                let mut failed = None;
                for _ in 0..PERMITS {
                    match sem.acquire().wait(left).acquire().await {
                        Ok(p) => permits.push(p),
                        Err(e) => {
                            failed = Some(e);
                            break;
                        }
                    }
                }
                for p in permits {
                    let _ = p.release().await;
                }
                failed.map_or(Ok(()), Err)
            }
            Primitive::RwLock => {
                let rw = RwLock::new(&l, name).expect("rwlock").with_reader_slots(READERS).expect("slots");
                match rw.write().wait(left).acquire().await {
                    Ok(w) => {
                        let _ = w.release().await;
                        Ok(())
                    }
                    Err(e) => Err(e),
                }
            }
        };
        match got {
            Ok(()) => return Some(started.elapsed()),
            Err(LockError::Timeout { .. }) => return None,
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
    None
}
