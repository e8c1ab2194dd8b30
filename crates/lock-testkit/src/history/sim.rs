//! Deterministic simulation of the client logic: the generative mix ([`generative::run`]) with
//! lock-core's `Locker`, watchdog and lost signal against the in-process store, each client
//! behind lock-core's fault wrapper, on a simulated clock. A tokio runtime started paused moves
//! its clock forward whenever every task waits, so leases, waits and faults of seconds take no
//! real time, and no server, socket or thread scheduler decides anything.
//!
//! The faults, drawn from the seed: a slow link for every client, a paused holder (one client's
//! renewals stall past its lease), cut requests (one client's calls fail before the store), lost
//! answers (the store applied the call, the client hears an error), and an outage.
//!
//! `DLOCK_SIM_SEED=<seed>` runs one seed again: the mix's choices and the faults are drawn from
//! it, and the clock is the runtime's own.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lock_core::backend::Mutex;
use lock_core::faults::{Faults, FaultyBackend, Op};

use super::Nemesis;
use super::generative::{self, GenReport, Mix, Primitive, PrimitivesReport, run_primitive};
use crate::MemoryFactory;
use crate::factory::{Client, Factory};

/// The seed of a simulation: `DLOCK_SIM_SEED` when set, else a random one.
pub fn sim_seed() -> u64 {
    std::env::var("DLOCK_SIM_SEED")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or_else(|| fastrand::u64(..))
}

/// Runs `mix` with faults drawn from `seed` on a paused clock; the report and the real time
/// it took.
pub fn simulate(mix: &Mix, seed: u64) -> (GenReport, Duration) {
    let (factory, nemesis) = parts(seed);
    timed(seed, generative::run(&factory, mix, Some(&nemesis), seed))
}

/// [`simulate`] for a semaphore's or a read-write lock's schedule ([`run_primitive`]).
pub fn simulate_primitive(primitive: Primitive, mix: &Mix, seed: u64) -> (PrimitivesReport, Duration) {
    let (factory, nemesis) = parts(seed);
    timed(seed, run_primitive(&factory, primitive, mix, Some(&nemesis), seed))
}

fn parts(seed: u64) -> (SimFactory, SimNemesis) {
    let factory = SimFactory::default();
    let nemesis =
        SimNemesis { clients: factory.clients.clone(), rng: Mutex::new(fastrand::Rng::with_seed(seed)) };
    (factory, nemesis)
}

/// `run` to its end on a one-thread runtime whose clock is paused, and the real time it took.
fn timed<T>(seed: u64, run: impl Future<Output = T>) -> (T, Duration) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a paused runtime");
    // Every task runs on this thread: the store's and the core's jitter draw from its
    // generator, seeded here.
    fastrand::seed(seed);
    let started = std::time::Instant::now();
    let out = rt.block_on(run);
    (out, started.elapsed())
}

/// The in-process table's clients ([`MemoryFactory`]), each behind a fault wrapper whose
/// handle the nemesis keeps.
#[derive(Default)]
struct SimFactory {
    memory: MemoryFactory,
    clients: Arc<Mutex<Vec<Faults>>>,
}

#[async_trait]
impl Factory for SimFactory {
    fn label(&self) -> String {
        format!("simulated {}", self.memory.label())
    }

    async fn client(&self) -> Client {
        let plain = self.memory.client().await;
        let (backend, faults) = FaultyBackend::wrap(plain.backend);
        self.clients.lock().push(faults);
        Client { backend: Arc::new(backend), faults: plain.faults }
    }
}

/// Strikes one fault drawn from its seeded generator, and heals every client.
struct SimNemesis {
    clients: Arc<Mutex<Vec<Faults>>>,
    rng: Mutex<fastrand::Rng>,
}

impl SimNemesis {
    /// One client's handle, drawn.
    fn one(&self, rng: &mut fastrand::Rng) -> Option<Faults> {
        let clients = self.clients.lock();
        (!clients.is_empty()).then(|| clients[rng.usize(..clients.len())].clone())
    }
}

#[async_trait]
impl Nemesis for SimNemesis {
    fn name(&self) -> String {
        "simulated faults (slow link, paused holder, cut requests, lost answers, outage)".into()
    }

    async fn strike(&self) {
        let mut rng = self.rng.lock();
        let ms = |rng: &mut fastrand::Rng, lo, hi| Duration::from_millis(rng.u64(lo..hi));
        match rng.u8(0..5) {
            0 => {
                let d = ms(&mut rng, 1, 40);
                self.clients.lock().iter().for_each(|f| f.latency(d));
            }
            1 => {
                // A paused holder: its renewals wait past the lease while others go on.
                let d = ms(&mut rng, 200, 1_200);
                if let Some(f) = self.one(&mut rng) {
                    f.stall(Op::Renew, d);
                }
            }
            2 => {
                let n = rng.u64(1..6);
                if let Some(f) = self.one(&mut rng) {
                    for op in [Op::TryAcquire, Op::Release, Op::Renew] {
                        f.fail_next(op, n);
                    }
                }
            }
            3 => {
                let n = rng.u64(1..4);
                let op = [Op::TryAcquire, Op::Release, Op::Renew][rng.usize(..3)];
                if let Some(f) = self.one(&mut rng) {
                    f.lose_answers(op, n);
                }
            }
            _ => self.clients.lock().iter().for_each(Faults::outage),
        }
    }

    async fn heal(&self) {
        self.clients.lock().iter().for_each(Faults::heal);
    }
}
