//! The generative schedules of the primitives built on the mutex: a semaphore (single permits,
//! and several at once one request in three) and a read-write lock (readers, writers, and
//! upgradeable readers that upgrade or not, where the store can), each client mixing waits and
//! single attempts, random leases, renewals, releases, drops and cut-off futures.
//!
//! Checks: a semaphore never has more than its permits held at once, and a writer is alone (no
//! reader or other writer holds at the same time), both without faults; no permit slot's
//! fenced register (and the writers') sees a lost update or a repeated token; no fence is
//! granted twice on a slot (or to the writers) and fences grow in real-time order, under every
//! fault; and afterwards a fresh client takes every permit, and the write side, within the
//! mix's bound (nothing the mix left behind wedges a slot).

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use lock_core::{FencingToken, LockError, RwLock, Semaphore};
use tokio::time::Instant;

use super::{Mix, Nemesis, lease, locker};
use crate::Factory;
use crate::history::Register;
use crate::history::judge::fence_faults;
use crate::history::strike_until;

mod ops;

/// Permits of the semaphore schedule.
const PERMITS: u32 = 3;
/// Reader slots of the read-write schedule.
const READERS: u32 = 4;
/// The sides whose waits are counted: reads (and permits, and upgradeable reads), writes, and
/// upgrades of an upgradeable read.
const READ: usize = 0;
const WRITE: usize = 1;
const UPGRADE: usize = 2;
/// Clients of the read-write schedule that only write.
const WRITERS: usize = 2;

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
    /// Of those, requests granted several permits at once.
    pub many: u64,
    /// Upgrades of an upgradeable read to the writer.
    pub upgrades: u64,
    /// Waiting requests that timed out, and waiting requests, by side: reads (permits),
    /// writes, upgrades. A side starved by the other times out where the other does not
    /// (checked on native read-write locks without faults: at most a quarter).
    pub timed_out: [(u64, u64); 3],
    /// Most holders that believed they held at once (at most the permits, or one writer).
    pub most_at_once: usize,
    /// A native read-write lock: readers are not limited to the reader slots.
    pub unbounded_readers: bool,
    /// Times a writer overlapped anyone else, or a reader a writer (must be 0).
    pub conflicts: u64,
    /// Lost updates and non-increasing tokens on the permit slots' registers (must be 0).
    pub register_faults: u64,
    /// Fences granted twice on one slot, or to two writers (must be 0 under every fault).
    pub repeated_fences: usize,
    /// Grants whose fence was not above that of a grant on the same slot (or writers') returned
    /// before their attempt began (must be 0 under every fault).
    pub fence_regressions: usize,
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
            "[{} seed={}] {} operations, {} acquisitions ({} of several permits, {} upgrades; {} strikes): \
             most at once {}, conflicts {}, register faults {}, repeated fences {}, fence regressions {}, \
             waits timed out read {}, write {}, upgrade {}, permanent errors {}, all free again after {:?}",
            self.label,
            self.seed,
            self.operations,
            self.acquisitions,
            self.many,
            self.upgrades,
            self.strikes,
            self.most_at_once,
            self.conflicts,
            self.register_faults,
            self.repeated_fences,
            self.fence_regressions,
            self.timed_out.map(|(t, w)| format!("{t}/{w}"))[READ],
            self.timed_out.map(|(t, w)| format!("{t}/{w}"))[WRITE],
            self.timed_out.map(|(t, w)| format!("{t}/{w}"))[UPGRADE],
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
        assert_eq!(self.repeated_fences, 0, "a fence was handed out twice: {rerun}");
        assert_eq!(self.fence_regressions, 0, "a later grant's fence did not increase: {rerun}");
        if self.strikes == 0 {
            let limit = if self.unbounded_readers { usize::MAX } else { limit };
            assert!(self.most_at_once <= limit, "more holders than allowed: {rerun}");
            assert_eq!(self.conflicts, 0, "a writer was not alone: {rerun}");
            // A native read-write lock starves neither side (phase-fair): under the writers'
            // steady pressure, readers must not time out where writers get in. Measured on
            // Redis: 16-19 of 26-28 read waits timed out when waiting writers went first,
            // 0-11 of 293-399 once phase-fair; a quarter lies far from both.
            if self.unbounded_readers {
                for (side, (timed_out, waits)) in ["read", "write"].iter().zip(self.timed_out) {
                    assert!(
                        timed_out * 4 <= waits,
                        "{side}s starved: {timed_out} of {waits} waits timed out: {rerun}"
                    );
                }
            }
        }
        assert!(self.liveness.is_some(), "a slot stayed blocked after the run: {rerun}");
    }
}

/// A fenced grant: slot, attempt began, attempt returned, fence.
type Grant = (usize, Instant, Instant, Option<u64>);

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
    many: AtomicU64,
    upgrades: AtomicU64,
    /// Waiting requests and their timeouts, by side.
    waits: [AtomicU64; 3],
    timeouts: [AtomicU64; 3],
    /// The store refused an upgradeable read as unsupported: the schedule stops asking.
    no_upgrade: AtomicBool,
    /// Every fenced grant: the slot (0 for the writers), when its attempt began and returned,
    /// and its fence.
    grants: lock_core::backend::Mutex<Vec<Grant>>,
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

    /// An upgradeable reader (already counted as a holder) became the writer: alone, but for
    /// itself.
    fn upgrade(&self) {
        let writers = self.writers.fetch_add(1, Ordering::SeqCst) + 1;
        if writers > 1 || self.holders.load(Ordering::SeqCst) > 1 {
            self.conflicts.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// A grant on `slot` (0 for the writers) whose attempt began at `invoked` returned now.
    fn granted(&self, slot: usize, invoked: Instant, fence: Option<FencingToken>) {
        self.grants.lock().push((slot, invoked, Instant::now(), fence.map(|f| f.0)));
    }

    /// Repeated fences and fence regressions, slot by slot.
    fn fence_faults(&self) -> (usize, usize) {
        let grants = self.grants.lock();
        let mut faults = (0, 0);
        for slot in 0..self.registers.len() {
            let on: Vec<_> = grants.iter().filter(|g| g.0 == slot).map(|g| (g.1, g.2, g.3)).collect();
            let (r, g) = fence_faults(&on);
            faults = (faults.0 + r, faults.1 + g);
        }
        faults
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
                    Primitive::Semaphore if rng.u8(0..3) == 0 => {
                        ops::permits(&sem, &state, &mix, &mut rng, ask).await
                    }
                    Primitive::Semaphore => ops::permit(&sem, &state, &mix, &mut rng, ask).await,
                    // Two clients only write: a steady writer pressure, which a lock that lets
                    // waiting writers go first turns into starved readers.
                    Primitive::RwLock => ops::rw_op(&rw, &state, &mix, &mut rng, ask, c < WRITERS).await,
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
    let (repeated_fences, fence_regressions) = state.fence_faults();
    PrimitivesReport {
        label,
        seed,
        operations: state.ops.load(Ordering::Relaxed),
        acquisitions: state.acquisitions.load(Ordering::Relaxed),
        many: state.many.load(Ordering::Relaxed),
        upgrades: state.upgrades.load(Ordering::Relaxed),
        timed_out: [READ, WRITE, UPGRADE]
            .map(|s| (state.timeouts[s].load(Ordering::Relaxed), state.waits[s].load(Ordering::Relaxed))),
        repeated_fences,
        fence_regressions,
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
