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

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use lock_core::backend::Mutex;
use lock_core::{FencingToken, LockError, Locker};
use tokio::time::Instant;

use crate::Factory;

pub mod generative;
pub mod nemesis;

/// What the register answered to a write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteOutcome {
    /// Stored.
    Accepted,
    /// Refused: a higher fencing token was seen before.
    Rejected,
}

#[derive(Debug, Default)]
struct RegisterState {
    value: u64,
    /// Highest accepted token, and the hold that wrote with it.
    top: Option<(u64, u64)>,
    accepted: u64,
    rejected: u64,
    lost_updates: u64,
    non_increasing: u64,
}

/// A fenced read-modify-write register: the protected resource of the workload.
#[derive(Debug, Default)]
pub struct Register {
    state: Mutex<RegisterState>,
}

impl Register {
    /// The current value, without a token (for observers).
    pub fn peek(&self) -> u64 {
        self.state.lock().value
    }

    /// Read for hold `hold`: the register remembers `fence` as the highest seen when it is, so a
    /// stale holder's later write is refused even if it comes before this holder's write.
    /// `None` when `fence` is below the highest seen.
    pub fn read(&self, hold: u64, fence: Option<FencingToken>) -> Option<u64> {
        let mut st = self.state.lock();
        if let (Some(f), Some((top, _))) = (fence, st.top)
            && f.0 < top
        {
            st.rejected += 1;
            return None;
        }
        if let Some(f) = fence
            && st.top.is_none_or(|(top, _)| f.0 > top)
        {
            st.top = Some((f.0, hold));
        }
        Some(st.value)
    }

    /// Write `read + 1` for hold `hold`, as read before; refused if `fence` is below the highest
    /// seen. An accepted write whose `read` is stale is a lost update; one whose token equals
    /// the top token of another hold did not increase.
    pub fn increment(&self, hold: u64, fence: Option<FencingToken>, read: u64) -> WriteOutcome {
        let mut st = self.state.lock();
        if let (Some(f), Some((top, _))) = (fence, st.top)
            && f.0 < top
        {
            st.rejected += 1;
            return WriteOutcome::Rejected;
        }
        if let (Some(f), Some((top, by))) = (fence, st.top)
            && f.0 == top
            && by != hold
        {
            st.non_increasing += 1;
        }
        if let Some(f) = fence {
            st.top = Some((f.0, hold));
        }
        if st.value != read {
            st.lost_updates += 1;
        }
        st.value = read + 1;
        st.accepted += 1;
        WriteOutcome::Accepted
    }
}

/// One hold as the holder saw it.
#[derive(Clone, Debug)]
pub struct HoldRecord {
    /// The client that held it.
    pub client: usize,
    /// Its fencing token.
    pub fence: Option<FencingToken>,
    /// When `acquire` was called.
    pub invoked: Instant,
    /// When `acquire` returned.
    pub acquired: Instant,
    /// When the write was sent, and what the register said; `None` when the holder knew the
    /// lock was lost before writing and did not write.
    pub write: Option<(Instant, WriteOutcome)>,
    /// The lost signal had fired before the write (so the holder skipped it).
    pub lost_before_write: bool,
    /// The hold turned out lost: the signal fired, or the release reported `LeaseLost`.
    pub lost: bool,
    /// When the release returned (or the holder crashed).
    pub released: Instant,
}

/// The result of one checked run.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Backend and schedule.
    pub label: String,
    /// Acquisitions recorded.
    pub acquisitions: usize,
    /// Failed acquire calls (temporary errors while the nemesis struck, timeouts).
    pub acquire_errors: u64,
    /// Pairs of overlapping holds whose writes were both accepted (must be 0).
    pub violations: usize,
    /// Accepted writes whose token did not exceed another hold's (must be 0).
    pub non_increasing: u64,
    /// Accepted writes based on a stale read (must be 0).
    pub lost_updates: u64,
    /// Writes the register refused because of their token.
    pub fence_rejections: u64,
    /// Grants whose fence an earlier grant already carried (must be 0, whatever the fault).
    pub repeated_fences: usize,
    /// Grants whose fence was not above that of a grant returned before their `acquire` was
    /// called (must be 0, whatever the fault).
    pub fence_regressions: usize,
    /// Holds that turned out lost.
    pub lost_holds: usize,
    /// Of those, how many knew before their write (and skipped it).
    pub told_before_write: usize,
    /// Lost holds that wrote without knowing (the signal had not fired yet at the write).
    pub unknowing_writes: usize,
    /// Of those, how many the register refused by their token.
    pub unknowing_rejected: usize,
    /// Simulated holder crashes, and the longest time from a crash to the next acquisition.
    pub crashes: usize,
    /// Longest crash-to-next-acquisition time.
    pub max_recovery: Option<Duration>,
    /// Nemesis strikes during the run.
    pub strikes: usize,
    /// Wall time of the run.
    pub elapsed: Duration,
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "[{}] {} acquisitions in {:.1?} ({} strikes, {} acquire errors): violations {}, non-increasing {}, \
             lost updates {}, fence rejections {}, repeated fences {}, fence regressions {}, lost holds {} (told before write {}, wrote unknowing {} of which fenced off {}), \
             crashes {} (max recovery {:?})",
            self.label,
            self.acquisitions,
            self.elapsed,
            self.strikes,
            self.acquire_errors,
            self.violations,
            self.non_increasing,
            self.lost_updates,
            self.fence_rejections,
            self.repeated_fences,
            self.fence_regressions,
            self.lost_holds,
            self.told_before_write,
            self.unknowing_writes,
            self.unknowing_rejected,
            self.crashes,
            self.max_recovery,
        )
    }
}

impl Report {
    /// Panic unless exclusion held: no overlapping accepted writes, no lost updates, no
    /// non-increasing tokens, and at least one acquisition.
    pub fn assert_safe(&self) {
        self.assert_fenced_safe();
        assert_eq!(self.violations, 0, "{self}");
    }

    /// Panic unless the fenced register stayed consistent: no lost updates and no
    /// non-increasing tokens, with at least one acquisition. For faults in which the server
    /// takes a hold away at once and without notice (a killed connection under a
    /// connection-bound lock, a restart that forgets every lock): the old holder can still
    /// write before it learns of the loss, so holds may overlap, and only fencing keeps the
    /// resource consistent. Overlaps are still counted in [`violations`](Self::violations).
    pub fn assert_fenced_safe(&self) {
        assert!(self.acquisitions > 0, "{self}: nothing was acquired");
        assert_eq!(self.lost_updates, 0, "{self}");
        assert_eq!(self.non_increasing, 0, "{self}");
        assert_eq!(
            (self.repeated_fences, self.fence_regressions),
            (0, 0),
            "{self}: fences repeated or regressed"
        );
    }
}

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

fn check(label: String, shared: &Shared, strikes: usize, elapsed: Duration) -> Report {
    let mut holds = shared.holds.lock().clone();
    holds.sort_by_key(|h| h.acquired);
    let reg = shared.register.state.lock();
    // Two holds overlap on [later acquisition, earlier release]; both writing inside that
    // window with both writes accepted is two holders acting at once.
    let mut violations = 0;
    for (i, a) in holds.iter().enumerate() {
        let Some((wa, WriteOutcome::Accepted)) = a.write else { continue };
        for b in holds[i + 1..].iter().take_while(|b| b.acquired < a.released) {
            let Some((wb, WriteOutcome::Accepted)) = b.write else { continue };
            let (start, end) = (b.acquired, a.released.min(b.released));
            if b.client != a.client && (start..=end).contains(&wa) && (start..=end).contains(&wb) {
                violations += 1;
            }
        }
    }
    let grants: Vec<_> = holds.iter().map(|h| (h.invoked, h.acquired, h.fence.map(|f| f.0))).collect();
    let (repeated_fences, fence_regressions) = generative::fence_faults(&grants);
    let crashes = shared.crashes.lock().clone();
    let max_recovery =
        crashes.iter().filter_map(|c| holds.iter().find(|h| h.acquired > *c).map(|h| h.acquired - *c)).max();
    Report {
        label,
        acquisitions: holds.len(),
        acquire_errors: shared.errors.load(Ordering::Relaxed),
        violations,
        non_increasing: reg.non_increasing,
        lost_updates: reg.lost_updates,
        fence_rejections: reg.rejected,
        repeated_fences,
        fence_regressions,
        lost_holds: holds.iter().filter(|h| h.lost).count(),
        told_before_write: holds.iter().filter(|h| h.lost && h.lost_before_write).count(),
        unknowing_writes: holds.iter().filter(|h| h.lost && h.write.is_some()).count(),
        unknowing_rejected: holds
            .iter()
            .filter(|h| h.lost && matches!(h.write, Some((_, WriteOutcome::Rejected))))
            .count(),
        crashes: crashes.len(),
        max_recovery,
        strikes,
        elapsed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn register_remembers_tokens_seen_on_reads() {
        let r = Register::default();
        assert_eq!(r.read(1, Some(FencingToken(3))), Some(0));
        assert_eq!(r.read(2, Some(FencingToken(4))), Some(0));
        assert_eq!(r.increment(1, Some(FencingToken(3)), 0), WriteOutcome::Rejected, "older than a read");
        assert_eq!(r.increment(2, Some(FencingToken(4)), 0), WriteOutcome::Accepted);
        assert_eq!(r.read(1, Some(FencingToken(3))), None);
        assert_eq!(r.peek(), 1);
    }

    #[test]
    fn register_rejects_older_tokens_and_counts_lost_updates() {
        let r = Register::default();
        assert_eq!(r.increment(1, Some(FencingToken(5)), 0), WriteOutcome::Accepted);
        assert_eq!(r.increment(2, Some(FencingToken(4)), 1), WriteOutcome::Rejected);
        assert_eq!(r.increment(3, Some(FencingToken(5)), 1), WriteOutcome::Accepted);
        assert_eq!(r.increment(4, None, 0), WriteOutcome::Accepted);
        let st = r.state.lock();
        assert_eq!((st.value, st.accepted, st.rejected), (1, 3, 1));
        assert_eq!(st.non_increasing, 1, "token 5 accepted for two holds");
        assert_eq!(st.lost_updates, 1, "hold 4 wrote on a stale read");
    }
}
