//! The generative history checker: every client runs a random mix of what users do with a
//! lock (waits and single attempts with random waits and leases, nested acquisitions of the
//! same owner through the same and through another client, renewals, releases, guards dropped
//! unreleased, and futures cut off at random points) while a nemesis breaks servers and
//! connections; the whole history is then checked.
//!
//! The checks:
//! - no two overlapping holds both had a write accepted by the fenced register, no lost update,
//!   no accepted token that failed to increase (as [`super::run`]);
//! - no hold that still believed it held was refused by the register (a newer holder existed
//!   while the older one had not been told it lost the lock); faults in which the server takes
//!   a hold away without notice (a killed connection under a session lock) are exempt, as only
//!   the fence can protect the resource there;
//! - no release found its hold gone while the holder had every reason to believe it held
//!   (no renewal had failed, its deadline had not passed): the server freed it behind the
//!   holder's back (the same exemption);
//! - liveness: after the run every client can take the key (nothing the mix left behind
//!   blocks it).
//!
//! Every run prints its seed; `DLOCK_HISTORY_SEED=<seed>` runs the same operations again (the
//! same choices per client; the interleaving still depends on the scheduler and the servers).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use lock_core::backend::Mutex;
use lock_core::{LockError, Locker};
use tokio::time::{Instant, timeout};

use super::{Nemesis, Register, WriteOutcome, strike_until};

mod client;
mod primitives;
mod report;

use crate::Factory;
use client::client;
pub use primitives::{Primitive, PrimitivesReport, run_primitive};
pub use report::GenReport;
use report::check;

/// The seed of a run: `DLOCK_HISTORY_SEED` when set, else a random one.
pub fn seed() -> u64 {
    std::env::var("DLOCK_HISTORY_SEED")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or_else(|| fastrand::u64(..))
}

/// The shape of a generative run.
#[derive(Clone, Debug)]
pub struct Mix {
    /// Concurrent clients; each also has a second client of its own, for nesting through
    /// another instance.
    pub clients: usize,
    /// Stop after this many operations in all...
    pub operations: u64,
    /// ...or after this long.
    pub max_time: Duration,
    /// The watchdog lease; explicit leases are drawn from one to three times it.
    pub lease: Duration,
    /// Longest pause inside a hold.
    pub hold_max: Duration,
    /// Quiet time before each strike, and how long a fault lasts.
    pub fault_period: (Duration, Duration),
    /// Longest the key may stay blocked after the run.
    pub liveness: Duration,
    /// Keys run side by side, each with its own clients and history (one fault for all): a
    /// soak's throughput grows with them, as one key's is bounded by its contention.
    pub lanes: usize,
}

impl Default for Mix {
    fn default() -> Self {
        Mix {
            clients: 4,
            operations: 2_500,
            max_time: Duration::from_secs(6),
            lease: Duration::from_millis(300),
            hold_max: Duration::from_millis(3),
            fault_period: (Duration::from_millis(1200), Duration::from_millis(700)),
            liveness: Duration::from_secs(15),
            lanes: 1,
        }
    }
}

impl Mix {
    /// `DLOCK_SOAK_OPERATIONS=N` makes a run of `N` operations (the time cap lifted) over
    /// `DLOCK_SOAK_LANES` keys (8 unless given): the documented soak. CI runs the short default.
    pub fn from_env(self) -> Self {
        let env = |name: &str| std::env::var(name).ok().and_then(|v| v.trim().parse::<u64>().ok());
        match env("DLOCK_SOAK_OPERATIONS") {
            Some(n) => Mix {
                operations: n,
                max_time: Duration::from_secs(4 * 3600),
                lanes: env("DLOCK_SOAK_LANES").map_or(8, |l| l.max(1) as usize),
                ..self
            },
            None => self,
        }
    }
}

/// What the mix did, by kind.
#[derive(Debug, Default)]
pub(crate) struct Counts {
    waits: AtomicU64,
    tries: AtomicU64,
    cut_offs: AtomicU64,
    nested: AtomicU64,
    nested_other: AtomicU64,
    renewals: AtomicU64,
    drops: AtomicU64,
    errors: AtomicU64,
}

/// One outer hold as its holder saw it.
#[derive(Clone, Debug)]
pub(crate) struct Hold {
    client: usize,
    /// When the outer attempt was made, and the fence it was granted: a grant whose attempt
    /// began after another's had returned must carry a larger fence.
    invoked: Instant,
    fence: Option<u64>,
    acquired: Instant,
    /// What the register said to the write, if one was made.
    write: Option<(Instant, WriteOutcome)>,
    /// The holder did not know of a loss when it wrote.
    believed: bool,
    lost: bool,
    /// The release answered `LeaseLost` before the hold's local deadline while the hold was
    /// still `Held` (no renewal had failed): the server freed it behind its holder's back.
    unseen: bool,
    released: Instant,
}

#[derive(Default)]
pub(crate) struct Shared {
    register: Register,
    holds: Mutex<Vec<Hold>>,
    ops: AtomicU64,
    next_hold: AtomicU64,
    counts: Counts,
    /// Permanent errors seen (each one fails the run).
    permanent: Mutex<Vec<String>>,
}

/// One key of a run: its history and its clients (each with its second client).
struct Lane {
    shared: Arc<Shared>,
    key: Arc<str>,
    clients: Vec<(Locker, Locker)>,
}

/// Run `mix` on `factory`'s clients with `seed` while `nemesis` strikes, and check it.
pub async fn run<F: Factory + ?Sized>(
    factory: &F,
    mix: &Mix,
    nemesis: Option<&dyn Nemesis>,
    seed: u64,
) -> GenReport {
    let per_lane = Mix { operations: mix.operations.div_ceil(mix.lanes.max(1) as u64), ..mix.clone() };
    let mut lanes = Vec::with_capacity(mix.lanes.max(1));
    for _ in 0..mix.lanes.max(1) {
        let mut clients = Vec::with_capacity(mix.clients);
        for _ in 0..mix.clients {
            clients.push((locker(factory, mix.lease).await, locker(factory, mix.lease).await));
        }
        lanes.push(Lane { shared: Arc::default(), key: crate::key("generative").into(), clients });
    }
    if let Some(n) = nemesis {
        n.aim(&lanes.iter().map(|l| l.key.clone()).collect::<Vec<_>>());
    }
    let started = Instant::now();
    let stop_at = started + mix.max_time;
    let mut tasks = Vec::new();
    for (l, lane) in lanes.iter_mut().enumerate() {
        for (c, (mine, other)) in lane.clients.drain(..).enumerate() {
            // Lane 0 draws what a single-key run of the same seed draws.
            let stream = (l * mix.clients + c) as u64 + 1;
            let rng = fastrand::Rng::with_seed(seed ^ stream.wrapping_mul(0x9E37_79B9_7F4A_7C15));
            let (shared, key, mix) = (lane.shared.clone(), lane.key.clone(), per_lane.clone());
            tasks.push(tokio::spawn(client(c, mine, other, key, shared, mix, rng, stop_at)));
        }
    }
    let nemesis_done = strike_until(nemesis, mix.fault_period, stop_at, || {
        lanes.iter().all(|l| l.shared.ops.load(Ordering::Relaxed) >= per_lane.operations)
    });
    let all = async {
        let mut alive = Vec::new();
        for t in tasks {
            alive.push(t.await.expect("a client of the mix panicked"));
        }
        alive
    };
    // The clients stay alive (their sessions and leases with them) until the liveness check:
    // what they left behind must not outlive its purpose while they live.
    let (strikes, _alive) = tokio::join!(nemesis_done, all);
    let mut label = format!("{} / {}", factory.label(), nemesis.map_or("no faults".into(), |n| n.name()));
    if lanes.len() > 1 {
        label.push_str(&format!(" / {} keys", lanes.len()));
    }
    if nemesis.is_some() {
        assert!(strikes > 0, "{label} seed={seed}: the nemesis never struck");
    }
    let elapsed = started.elapsed();
    let mut reports = Vec::with_capacity(lanes.len());
    for lane in &lanes {
        let liveness = free_again(factory, &lane.key, mix).await;
        reports.push(check(label.clone(), seed, &lane.shared, strikes, elapsed, liveness));
    }
    GenReport::merge(reports)
}

async fn locker<F: Factory + ?Sized>(factory: &F, lease: Duration) -> Locker {
    factory.client().await.locker().with_watchdog_lease(lease).expect("lease")
}

/// How long a fresh client takes to get the key, within the mix's bound.
async fn free_again<F: Factory + ?Sized>(factory: &F, key: &str, mix: &Mix) -> Option<Duration> {
    let l = locker(factory, mix.lease).await;
    let started = Instant::now();
    while started.elapsed() < mix.liveness {
        let left = mix.liveness.saturating_sub(started.elapsed());
        match l.lock(key).wait(left).acquire().await {
            Ok(g) => {
                let took = started.elapsed();
                let _ = g.release().await;
                return Some(took);
            }
            Err(LockError::Timeout { .. }) => return None,
            // A server still coming back: ask again.
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
    None
}

/// A lease for one request: the watchdog's (`None`), one to three times the mix's, or a long
/// one (2 to 4 s: long enough for a Redis waiter to take a hand-over without a round trip,
/// which it does only when the lease outlasts the claim window).
fn lease(rng: &mut fastrand::Rng, base: Duration) -> Option<Duration> {
    match rng.u8(0..4) {
        0 | 1 => None,
        2 => Some(base.mul_f64(1.0 + 2.0 * rng.f64())),
        _ => Some(Duration::from_secs(2).mul_f64(1.0 + rng.f64())),
    }
}

/// Runs `fut`, or cuts it off after a random fraction of `limit` (a caller going away): `None`.
async fn maybe_cut<T>(
    rng: &mut fastrand::Rng,
    odds: u8,
    limit: Duration,
    c: &Counts,
    fut: impl Future<Output = T>,
) -> Option<T> {
    if rng.u8(0..100) >= odds {
        return Some(fut.await);
    }
    c.cut_offs.fetch_add(1, Ordering::Relaxed);
    timeout(limit.mul_f64(rng.f64()), fut).await.ok()
}
