//! A Jepsen-style check of exclusion under faults: clients take the lock, read a register kept
//! outside the lock service, hold for a while, write the register back tagged with their
//! fencing token and release; a nemesis breaks servers and connections meanwhile. The recorded
//! history is then checked for overlapping holds that both wrote, accepted writes whose token
//! did not increase, lost updates, and holders that wrote without knowing their lock was gone.
//!
//! The register rejects a read or write whose token is lower than the highest it has seen (on
//! a read or a write), as a fenced storage service would; every backend and the Redlock quorum
//! hand out tokens, which the register checks this way. Without a token (a backend without
//! fencing) it accepts everything, so any overlap shows up as a lost update.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use lock_core::backend::Mutex;
use lock_core::{LockError, Locker};
use tokio::time::Instant;

use crate::Factory;

mod check;
pub mod generative;
mod judge;
pub mod nemesis;
mod register;
pub mod sim;

use check::check;
pub use check::{HoldRecord, Report};
pub use register::{Register, WriteOutcome};

/// Faults injected while the workload runs: `strike` breaks something, `heal` repairs it.
#[async_trait]
pub trait Nemesis: Send + Sync {
    /// Name for the report, e.g. `"server paused 1s"`.
    fn name(&self) -> String;
    /// Break something (pause or kill a server, cut connections).
    async fn strike(&self);
    /// Repair what `strike` broke.
    async fn heal(&self);
    /// The keys the run uses, told before it starts: for faults aimed at a key (an operator's
    /// force-unlock); others ignore them.
    fn aim(&self, keys: &[Arc<str>]) {
        let _ = keys;
    }
}

/// The workload's shape.
#[derive(Clone, Debug)]
pub struct Workload {
    /// Concurrent clients, each with its own connection or session.
    pub clients: usize,
    /// Stop after this many acquisitions in all...
    pub acquisitions: usize,
    /// ...or after this long, whichever comes first.
    pub max_time: Duration,
    /// Longest hold before the write (uniformly random from zero).
    pub hold_max: Duration,
    /// The watchdog lease of every client.
    pub lease: Duration,
    /// Every client crashes (abandons its guard and its connection) on every `n`-th of its
    /// acquisitions, at most [`CRASHES_PER_CLIENT`] times; `None`: never.
    pub crash_every: Option<usize>,
    /// Quiet time before each strike, and how long a fault lasts before `heal`.
    pub fault_period: (Duration, Duration),
}

impl Default for Workload {
    fn default() -> Self {
        Workload {
            clients: 5,
            acquisitions: 2_000,
            max_time: Duration::from_secs(8),
            hold_max: Duration::from_millis(2),
            lease: Duration::from_millis(300),
            crash_every: None,
            fault_period: (Duration::from_millis(1500), Duration::from_millis(900)),
        }
    }
}

impl Workload {
    /// `DLOCK_SOAK_ACQUISITIONS=N` scales a run up to `N` acquisitions (and lifts the time cap
    /// accordingly) for the documented soak; CI runs the short default.
    pub fn from_env(self) -> Self {
        match std::env::var("DLOCK_SOAK_ACQUISITIONS").ok().and_then(|v| v.parse::<usize>().ok()) {
            Some(n) => Workload { acquisitions: n, max_time: Duration::from_secs(3600), ..self },
            None => self,
        }
    }
}

/// Most simulated crashes per client (each needs a fresh client connection or session).
pub const CRASHES_PER_CLIENT: usize = 2;

struct Shared {
    register: Register,
    holds: Mutex<Vec<HoldRecord>>,
    crashes: Mutex<Vec<Instant>>,
    taken: AtomicU64,
    errors: AtomicU64,
    next_hold: AtomicU64,
}

/// Run `workload` against `factory`'s clients while `nemesis` strikes, and check the history.
pub async fn run<F: Factory + ?Sized>(
    factory: &F,
    workload: &Workload,
    nemesis: Option<&dyn Nemesis>,
) -> Report {
    let shared = Arc::new(Shared {
        register: Register::default(),
        holds: Mutex::default(),
        crashes: Mutex::default(),
        taken: AtomicU64::new(0),
        errors: AtomicU64::new(0),
        next_hold: AtomicU64::new(0),
    });
    let key = crate::key("history");
    if let Some(n) = nemesis {
        n.aim(&[Arc::from(key.as_str())]);
    }
    // Every client is built before the clock starts: a backend slow to connect must not eat
    // the run's time (and with it the nemesis's strikes).
    let mut clients = Vec::with_capacity(workload.clients);
    for _ in 0..workload.clients {
        let locker = new_locker(factory, workload.lease).await;
        let mut fresh = Vec::new();
        if workload.crash_every.is_some() {
            // Replacement clients are built here: the factory is not 'static inside the task.
            for _ in 0..CRASHES_PER_CLIENT {
                fresh.push(new_locker(factory, workload.lease).await);
            }
        }
        clients.push((locker, fresh));
    }
    let started = Instant::now();
    let stop_at = started + workload.max_time;
    let mut tasks = Vec::new();
    for (client, (mut locker, mut fresh)) in clients.into_iter().enumerate() {
        let (shared, key, w) = (shared.clone(), key.clone(), workload.clone());
        tasks.push(tokio::spawn(async move {
            let mut mine = 0usize;
            while shared.taken.load(Ordering::Relaxed) < w.acquisitions as u64 && Instant::now() < stop_at {
                let invoked = Instant::now();
                let g = match locker.lock(&key).wait(Duration::from_secs(5)).acquire().await {
                    Ok(g) => g,
                    Err(e) => {
                        shared.errors.fetch_add(1, Ordering::Relaxed);
                        if !e.is_temporary() && !matches!(e, LockError::Timeout { .. }) {
                            panic!("client {client}: permanent error {e}");
                        }
                        continue;
                    }
                };
                let acquired = Instant::now();
                shared.taken.fetch_add(1, Ordering::Relaxed);
                mine += 1;
                let hold = shared.next_hold.fetch_add(1, Ordering::Relaxed);
                let read = shared.register.read(hold, g.fence());
                let nap = w.hold_max.mul_f64(fastrand::f64());
                if !nap.is_zero() {
                    tokio::time::sleep(nap).await;
                }
                let lost_before_write = g.is_lost();
                let write = match read {
                    _ if lost_before_write => None,
                    Some(v) => Some((Instant::now(), shared.register.increment(hold, g.fence(), v))),
                    // The read was refused: a newer holder exists; nothing to write.
                    None => Some((Instant::now(), WriteOutcome::Rejected)),
                };
                let fence = g.fence();
                let crash = w.crash_every.is_some_and(|n| mine.is_multiple_of(n)) && !fresh.is_empty();
                let lost = if crash {
                    // As a crashed process: no release, and its connection or session goes away.
                    g.abandon();
                    shared.crashes.lock().push(Instant::now());
                    if let Some(next) = fresh.pop() {
                        locker = next;
                    }
                    false
                } else {
                    let was_lost = g.is_lost();
                    match g.release().await {
                        Ok(()) => was_lost,
                        Err(LockError::LeaseLost { .. }) => true,
                        Err(_) => was_lost, // unknown: the lease frees it
                    }
                };
                shared.holds.lock().push(HoldRecord {
                    client,
                    fence,
                    invoked,
                    acquired,
                    write,
                    lost_before_write,
                    lost,
                    released: Instant::now(),
                });
            }
        }));
    }
    let nemesis_done = strike_until(nemesis, workload.fault_period, stop_at, || {
        shared.taken.load(Ordering::Relaxed) >= workload.acquisitions as u64
    });
    let all_tasks = async {
        for t in tasks {
            t.await.expect("workload client panicked");
        }
    };
    let (strikes, ()) = tokio::join!(nemesis_done, all_tasks);
    // A schedule whose fault never happened proved nothing about that fault.
    if let Some(n) = nemesis {
        assert!(
            strikes > 0,
            "{} / {}: the nemesis never struck ({} acquisitions in {:.1?}): lengthen the workload or shorten its quiet time",
            factory.label(),
            n.name(),
            shared.taken.load(Ordering::Relaxed),
            started.elapsed(),
        );
    }
    let label = match nemesis {
        Some(n) => format!("{} / {}", factory.label(), n.name()),
        None => format!("{} / no faults", factory.label()),
    };
    check(label, &shared, strikes, started.elapsed())
}

/// Strikes with `nemesis` (if any) every `period.0`, healing after `period.1`, until `done()`
/// or `stop_at`; returns the number of strikes. The one fault loop of every checker.
pub(crate) async fn strike_until(
    nemesis: Option<&dyn Nemesis>,
    period: (Duration, Duration),
    stop_at: Instant,
    done: impl Fn() -> bool,
) -> usize {
    let Some(n) = nemesis else { return 0 };
    let (quiet, fault) = period;
    let mut strikes = 0;
    while !done() && Instant::now() < stop_at {
        tokio::time::sleep(quiet).await;
        if Instant::now() >= stop_at {
            break;
        }
        n.strike().await;
        strikes += 1;
        tokio::time::sleep(fault).await;
        n.heal().await;
    }
    strikes
}

async fn new_locker<F: Factory + ?Sized>(factory: &F, lease: Duration) -> Locker {
    factory.client().await.locker().with_watchdog_lease(lease).expect("workload lease")
}
