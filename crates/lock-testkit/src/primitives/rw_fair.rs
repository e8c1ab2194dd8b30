//! Phase fairness of the read-write lock under steady contention (case `rw_phase_fair`, in the
//! rwlock suite): neither side starves the other.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use lock_core::{LockError, RwLock};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::factory::Factory;
use crate::poll::within;

/// How long the contention lasts.
const WINDOW: Duration = Duration::from_secs(2);
/// Each participant's wait for one hold: a timeout means a side was starved that long.
const WAIT: Duration = Duration::from_secs(3);
/// How long each hold lasts: long enough that the lock is rarely free, so a side that is not
/// given its turn never finds it free by luck.
const HOLD: Duration = Duration::from_millis(2);
/// The fewest holds anyone must get in the window from a native lock. Phase-fair, a reader gets
/// in about once per write (every writer's release lets the waiting readers in), so even a slow
/// store on a loaded machine gives each one dozens; starved readers got one.
const MIN_HOLDS: usize = 3;
/// The most writes that may begin, in a reader's median wait, between its request and its
/// grant. Phase-fair it is a few: 3 on the in-process store alone, 5-10 with three busy loops
/// on the machine (a reader's request reaches the lock a scheduler slice late); starved readers
/// get in only when the writers happen to pause, after hundreds. A count of holds against writes measured
/// the machine as much as the lock: with three busy loops beside it, readers got 44 holds to
/// 437 writes on the in-process store, which is phase-fair.
const MAX_MEDIAN_OVERTAKES: usize = 16;

#[derive(Clone, Copy, PartialEq)]
enum Role {
    Writer,
    Reader,
    Upgradeable,
}

impl Role {
    fn name(self) -> &'static str {
        match self {
            Role::Writer => "writer",
            Role::Reader => "reader",
            Role::Upgradeable => "upgradeable reader",
        }
    }
}

/// What one participant got in the window.
struct Tally {
    role: Role,
    holds: usize,
    timeouts: usize,
    /// Per read hold: the writes that began between its request and its grant.
    overtakes: Vec<usize>,
}

impl Tally {
    fn median_overtakes(&self) -> usize {
        let mut o = self.overtakes.clone();
        o.sort_unstable();
        o.get(o.len() / 2).copied().unwrap_or(0)
    }
}

/// Holds `l` on `role`'s side, one hold after another, until `stop`; writers count the writes
/// that began in `writes`.
fn spawn_loop(l: RwLock, role: Role, stop: Arc<AtomicBool>, writes: Arc<AtomicUsize>) -> JoinHandle<Tally> {
    tokio::spawn(async move {
        let (mut holds, mut timeouts, mut overtakes) = (0, 0, Vec::new());
        while !stop.load(Ordering::SeqCst) {
            let asked = writes.load(Ordering::SeqCst);
            let granted = |n: &mut Vec<usize>| n.push(writes.load(Ordering::SeqCst) - asked);
            // Each guard is released after HOLD; a timeout is counted, any other error fails.
            let outcome = match role {
                Role::Writer => match l.write().wait(WAIT).acquire().await {
                    Ok(g) => {
                        writes.fetch_add(1, Ordering::SeqCst);
                        tokio::time::sleep(HOLD).await;
                        g.release().await
                    }
                    Err(e) => Err(e),
                },
                Role::Reader => match l.read().wait(WAIT).acquire().await {
                    Ok(g) => {
                        granted(&mut overtakes);
                        tokio::time::sleep(HOLD).await;
                        g.release().await
                    }
                    Err(e) => Err(e),
                },
                Role::Upgradeable => match l.upgradeable_read().wait(WAIT).acquire().await {
                    Ok(g) => {
                        granted(&mut overtakes);
                        tokio::time::sleep(HOLD).await;
                        g.release().await
                    }
                    Err(e) => Err(e),
                },
            };
            match outcome {
                Ok(()) => holds += 1,
                Err(LockError::Timeout { .. }) => timeouts += 1,
                Err(e) => panic!("{}: {e}", role.name()),
            }
        }
        Tally { role, holds, timeouts, overtakes }
    })
}

/// Two writers loop on one read-write lock with three readers and (where the store can
/// upgrade) an upgradeable reader, each its own client, holding ~2 ms at a time.
///
/// A native lock (the store's own shared holds) is phase-fair: a reader that waits behind a
/// writer gets in before the writers that queued after it, and a writer waits only for the
/// readers that were in before it. So every participant gets a good share of holds (a reader
/// about one per write) and no wait of 3 s times out. A lock that passes a freed lock from
/// writer to writer while a waiting writer keeps new readers out starves the readers (they got
/// one hold each against hundreds of writes).
///
/// The lock built from a gate and reader slots (no shared holds in the store) lets readers
/// behind a writer in first only where the store serves the gate's waiters in order (see
/// `RwLock`): where it does ([`Capability::fair`](lock_core::Capability)) it is held to the
/// floors of a native lock; a store whose waiters race for a freed lock must starve nobody (no
/// wait times out, everyone holds), and the figures say how fair it was.
pub async fn rw_phase_fair<F: Factory + ?Sized>(f: &F) {
    let name = crate::factory::key("rw_phase");
    let stop = Arc::new(AtomicBool::new(false));
    let mut roles = vec![Role::Writer, Role::Writer, Role::Reader, Role::Reader, Role::Reader];
    let first = f.client().await.locker();
    let caps = first.backend().capabilities();
    if caps.upgrade {
        roles.push(Role::Upgradeable);
    }
    let mut tasks = Vec::new();
    let writes_begun = Arc::new(AtomicUsize::new(0));
    let mut native = false;
    for (i, role) in roles.into_iter().enumerate() {
        let locker = if i == 0 { first.clone() } else { f.client().await.locker() };
        let l = RwLock::new(&locker, &name).expect("rwlock").with_reader_slots(4).expect("slots");
        native = l.is_native();
        tasks.push(spawn_loop(l, role, stop.clone(), writes_begun.clone()));
    }
    let started = Instant::now();
    tokio::time::sleep(WINDOW).await;
    stop.store(true, Ordering::SeqCst);
    let mut tallies = Vec::new();
    for t in tasks {
        // A participant in the middle of a wait finishes it (at most WAIT) before it stops.
        tallies.push(within(WAIT * 3, "a participant stopping", t).await.expect("task"));
    }
    let took = started.elapsed();
    let writes: usize = tallies.iter().filter(|t| t.role == Role::Writer).map(|t| t.holds).sum();
    let figures: Vec<String> = tallies
        .iter()
        .map(|t| match t.role {
            Role::Writer => format!("{} {} ({} timed out)", t.role.name(), t.holds, t.timeouts),
            _ => format!(
                "{} {} ({} timed out, median overtaken by {} writes)",
                t.role.name(),
                t.holds,
                t.timeouts,
                t.median_overtakes()
            ),
        })
        .collect();
    let figures = figures.join(", ");
    // The gate's waiters served in arrival order make the composite phase-fair too.
    let strict = native || caps.fair;
    let kind = match (native, caps.fair) {
        (true, _) => "native",
        (false, true) => "gate and slots, gate served in order",
        (false, false) => "gate and slots",
    };
    eprintln!("[{}] rw_phase_fair ({kind}) in {took:?}: {figures}", f.label());
    let fair = |t: &Tally| t.holds >= MIN_HOLDS && t.median_overtakes() <= MAX_MEDIAN_OVERTAKES;
    for t in &tallies {
        let who = t.role.name();
        assert_eq!(t.timeouts, 0, "a {who} waited {WAIT:?} in vain: {figures}");
        assert!(t.holds > 0, "a {who} never held: {figures}");
        if strict {
            assert!(fair(t), "a {who} was not served in its phase ({writes} writes): {figures}");
        }
    }
    if !strict && !tallies.iter().all(fair) {
        eprintln!(
            "NOT PHASE-FAIR [{}] rw_phase_fair: a gate-and-slots lock over this store: {figures}",
            f.label()
        );
    }
}
