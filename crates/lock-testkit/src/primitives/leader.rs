//! The leader suite (cases named `leader_*`): [`LeaderElection`] on any backend.
//!
//! A "crashed" leader is one whose client can no longer reach the store (a [`Partition`]
//! around its backend): it cannot renew, so the lease passes on, and it must have been told it
//! lost leadership before that. Session-bound backends do not lose a hold by time while the
//! session lives, so those cases skip there (their sessions are faulted in the backends' own
//! fault tests).

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use lock_core::backend::{LockBackend, Mutex};
use lock_core::{
    CancellationToken, Candidate, Capability, FencingToken, LeaderElection, Leadership, LockError, Locker,
};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::factory::{Client, Factory, key, skip};
use crate::hooked::hooked;
use crate::poll::within;

/// How long any one step of a case may take before the case fails (liveness, not timing).
const STEP: Duration = Duration::from_secs(20);
/// The clock-drift margin of the candidates that get partitioned: wide, so that a busy test
/// machine's scheduling delays stay far below it (as in `lost_before_successor`).
const MARGIN: Duration = Duration::from_millis(100);

/// A backend whose every call fails with a temporary error while the partition is up: the
/// client cannot reach the store, as in a network partition or a paused process.
#[derive(Debug)]
pub struct Partition;

impl Partition {
    /// `inner`, and the switch that cuts it off (`true`: cut).
    pub fn wrap(inner: Arc<dyn LockBackend>) -> (Arc<dyn LockBackend>, Arc<AtomicBool>) {
        let cut = Arc::new(AtomicBool::new(false));
        let (name, switch) = (inner.name(), cut.clone());
        let partitioned = hooked(inner, move |_| {
            if switch.load(Ordering::SeqCst) {
                return Err(LockError::temporary(name, std::io::Error::other("partitioned by the test")));
            }
            Ok(())
        });
        (Arc::new(partitioned), cut)
    }
}

/// A candidate's election on its own client, with the partition switch of that client.
async fn member<F: Factory + ?Sized>(f: &F, name: &str, identity: &str) -> (LeaderElection, Arc<AtomicBool>) {
    let Client { backend, .. } = f.client().await;
    let (backend, cut) = Partition::wrap(backend);
    let locker = Locker::new(backend).with_clock_drift(0.0, MARGIN).expect("drift");
    let election =
        LeaderElection::new(&locker, name, identity).expect("election").lease(f.lease()).expect("lease");
    (election, cut)
}

/// Whether a leader whose client is cut off loses its term by time on this backend.
fn loses_by_time(caps: Capability) -> bool {
    !caps.session_bound
}

/// Wait until `c` leads; the term's fencing token.
async fn lead(c: &Candidate, what: &str) -> Option<FencingToken> {
    within(STEP, what, c.until_leader()).await
}

/// Wait until `rx` shows a follower.
async fn until_follower(rx: &mut watch::Receiver<Leadership>, what: &str) {
    within(STEP, what, rx.wait_for(|s| !s.is_leader())).await.expect("campaign task alive");
}

/// How a leader leaves in the churn case.
#[derive(Debug, Clone, Copy)]
enum Exit {
    /// `resign()`, then rejoin once someone else led.
    Resign,
    /// Its client cut off: it must notice (lost) before anyone else leads; rejoin healed.
    Crash,
    /// Dropped; a new candidate takes its seat.
    Drop,
}

/// Shared bookkeeping of the churn case.
struct Churn {
    /// Candidates that believe they lead now.
    leaders: AtomicUsize,
    /// The most that ever did at once.
    most: AtomicUsize,
    /// Terms in the order they were taken, with who took them.
    terms: Mutex<Vec<(usize, Option<FencingToken>)>>,
    /// Bumped at every new term (a resigned or crashed leader rejoins after the next one).
    started: watch::Sender<usize>,
    exits: Mutex<VecDeque<Exit>>,
    stop: CancellationToken,
}

/// 1. Exactly one leader at a time among three candidates under churn (resignation, a crash
///    by partition, a dropped candidate replaced by a new one): a shared count of candidates
///    that believe they lead never exceeds 1, and terms strictly increase.
pub async fn leader_one_at_a_time_under_churn<F: Factory + ?Sized>(f: &F) {
    const CANDIDATES: usize = 3;
    const TERMS: usize = 9;
    let label = f.label();
    let name = key("churn");
    let caps = f.client().await.backend.capabilities();
    let mut exits: VecDeque<Exit> =
        [Exit::Resign, Exit::Crash, Exit::Drop].into_iter().cycle().take(TERMS).collect();
    if !loses_by_time(caps) {
        skip(&label, "leader_one_at_a_time_under_churn", "crash exits: session-bound (resign and drop only)");
        exits = exits.into_iter().map(|e| if matches!(e, Exit::Crash) { Exit::Drop } else { e }).collect();
    }
    let churn = Arc::new(Churn {
        leaders: AtomicUsize::new(0),
        most: AtomicUsize::new(0),
        terms: Mutex::new(Vec::new()),
        started: watch::Sender::new(0),
        exits: Mutex::new(exits),
        stop: CancellationToken::new(),
    });
    let mut seats = Vec::new();
    for seat in 0..CANDIDATES {
        let (election, cut) = member(f, &name, &format!("seat-{seat}")).await;
        seats.push(tokio::spawn(sit(seat, election, cut, churn.clone())));
    }
    let mut started = churn.started.subscribe();
    within(STEP * 3, "all churn terms", started.wait_for(|n| *n > TERMS)).await.expect("sender alive");
    churn.stop.cancel();
    for s in seats {
        within(STEP, "a seat to stop", s).await.expect("seat task");
    }
    let terms = churn.terms.lock().clone();
    eprintln!("[{label}] {} terms: {terms:?}", terms.len());
    assert_eq!(churn.most.load(Ordering::SeqCst), 1, "two candidates led at once: {terms:?}");
    if caps.fencing {
        let fences: Vec<_> = terms.iter().map(|(_, t)| t.expect("fenced backend")).collect();
        assert!(fences.windows(2).all(|w| w[0] < w[1]), "terms do not strictly increase: {fences:?}");
    }
    let seats_led: std::collections::HashSet<_> = terms.iter().map(|(s, _)| s).collect();
    assert!(seats_led.len() > 1, "leadership never changed hands: {terms:?}");
}

/// Wait until a term after the `n`th has started (or the case stops).
async fn next_term(churn: &Churn, n: usize) {
    let mut rx = churn.started.subscribe();
    tokio::select! {
        r = rx.wait_for(|s| *s > n) => drop(r),
        () = churn.stop.cancelled() => {}
    }
}

/// One seat of the churn case: campaigns, counts itself while leading, leaves as told.
async fn sit(seat: usize, election: LeaderElection, cut: Arc<AtomicBool>, churn: Arc<Churn>) {
    let mut cand = election.campaign().expect("campaign");
    loop {
        let term = tokio::select! {
            t = cand.until_leader() => t,
            () = churn.stop.cancelled() => return,
        };
        let Some(lost) = cand.lost_token() else { continue };
        let now = churn.leaders.fetch_add(1, Ordering::SeqCst) + 1;
        churn.most.fetch_max(now, Ordering::SeqCst);
        churn.terms.lock().push((seat, term));
        let n = {
            let mut n = 0;
            churn.started.send_modify(|s| {
                *s += 1;
                n = *s;
            });
            n
        };
        let exit = churn.exits.lock().pop_front();
        match exit {
            // Out of script: lead until the case stops.
            None => {
                tokio::select! {
                    () = lost.cancelled() => {}
                    () = churn.stop.cancelled() => {}
                }
                churn.leaders.fetch_sub(1, Ordering::SeqCst);
                if churn.stop.is_cancelled() {
                    drop(cand);
                    return;
                }
            }
            Some(Exit::Resign) => {
                churn.leaders.fetch_sub(1, Ordering::SeqCst);
                cand.resign().await.expect("resign");
                assert!(!cand.is_leader(), "a resigned candidate still leads");
                next_term(&churn, n).await;
                cand.rejoin();
            }
            Some(Exit::Crash) => {
                cut.store(true, Ordering::SeqCst);
                // Told by its own clock, while the successor still waits out the lease.
                within(STEP, "the cut-off leader to notice", lost.cancelled()).await;
                churn.leaders.fetch_sub(1, Ordering::SeqCst);
                assert!(!cand.is_leader(), "a leader told it lost still leads");
                next_term(&churn, n).await;
                cut.store(false, Ordering::SeqCst);
            }
            Some(Exit::Drop) => {
                churn.leaders.fetch_sub(1, Ordering::SeqCst);
                drop(cand);
                // A new process takes the seat (a new owner on the same client).
                cand = election.campaign().expect("campaign");
            }
        }
    }
}

/// 2. Resignation hands over: the resigning leader is a follower before the next leader's term
///    starts, the next term's token is larger, and the resigned candidate stays out until it
///    rejoins.
pub async fn leader_resignation_hands_over<F: Factory + ?Sized>(f: &F) {
    let name = key("resign");
    let (ea, _) = member(f, &name, "a").await;
    let (eb, _) = member(f, &name, "b").await;
    let a = ea.campaign().expect("campaign a");
    let ta = lead(&a, "a to lead").await;
    let b = eb.campaign().expect("campaign b");
    assert!(!b.is_leader() && b.term().is_none(), "b leads while a does");
    let mut a_changes = a.changes();
    let lost_a = a.lost_token().expect("a leads");
    a.resign().await.expect("resign");
    assert!(lost_a.is_cancelled() && !a.is_leader() && a.term().is_none());
    until_follower(&mut a_changes, "a to follow").await;
    let tb = lead(&b, "b to lead after a resigned").await;
    if let (Some(ta), Some(tb)) = (ta, tb) {
        assert!(tb > ta, "term {tb} after {ta}");
    }
    assert!(!a.is_leader(), "a resigned candidate must not campaign");
    a.rejoin();
    b.resign().await.expect("resign b");
    let ta2 = lead(&a, "a to lead again after rejoining").await;
    if let (Some(tb), Some(ta2)) = (tb, ta2) {
        assert!(ta2 > tb, "term {ta2} after {tb}");
    }
    a.resign().await.expect("resign a");
}

/// 3. A leader cut off from the store is told it lost leadership (its term token cancelled,
///    `is_leader()` false) before another candidate becomes leader.
pub async fn leader_told_before_successor<F: Factory + ?Sized>(f: &F) {
    let label = f.label();
    if !loses_by_time(f.client().await.backend.capabilities()) {
        return skip(
            &label,
            "leader_told_before_successor",
            "session-bound: no lease deadline (backend fault tests)",
        );
    }
    let name = key("told");
    let (ea, cut) = member(f, &name, "a").await;
    let (eb, _) = member(f, &name, "b").await;
    let a = ea.campaign().expect("campaign a");
    let ta = lead(&a, "a to lead").await;
    let b = eb.campaign().expect("campaign b");
    let lost = a.lost_token().expect("a leads");
    let told = tokio::spawn(async move {
        lost.cancelled().await;
        Instant::now()
    });
    cut.store(true, Ordering::SeqCst);
    let tb = lead(&b, "b to lead after a was cut off").await;
    let succeeded = Instant::now();
    assert!(!a.is_leader(), "a still believes it leads while b does");
    let told = within(STEP, "a's lost token", told).await.expect("task");
    eprintln!(
        "[{label}] the cut-off leader was told {:?} before b led",
        succeeded.saturating_duration_since(told)
    );
    assert!(told < succeeded, "a was told after b led");
    if let (Some(ta), Some(tb)) = (ta, tb) {
        assert!(tb > ta, "term {tb} after {ta}");
    }
    cut.store(false, Ordering::SeqCst);
    drop(a);
    b.resign().await.expect("resign b");
}

/// 4. A leader whose hold is removed behind its back (an operator deleting the lock) steps
///    down once it finds out (its term's token cancelled, `changes()` leaves that term), and the
///    next term, whichever candidate wins it, has a larger token.
pub async fn leader_severed_leader_steps_down<F: Factory + ?Sized>(f: &F) {
    let label = f.label();
    let name = key("sever");
    let ca = f.client().await;
    let locker = Locker::new(ca.backend.clone());
    let ea = LeaderElection::new(&locker, &name, "a").expect("election").lease(f.lease()).expect("lease");
    let (eb, _) = member(f, &name, "b").await;
    let a = ea.campaign().expect("campaign a");
    let ta = lead(&a, "a to lead").await;
    let lost = a.lost_token().expect("a leads");
    let mut a_changes = a.changes();
    let b = eb.campaign().expect("campaign b");
    if let Err(u) = ca.faults.sever(&name).await {
        drop((a, b));
        return skip(&label, "leader_severed_leader_steps_down", u);
    }
    within(STEP, "a to be told its hold was severed", lost.cancelled()).await;
    assert!(a.term().is_none_or(|t| Some(t) != ta), "a still in its severed term");
    // The watch may have moved on to a's next term already; it never shows the severed one.
    within(
        STEP,
        "a's changes to leave the severed term",
        a_changes.wait_for(|s| *s != Leadership::Leader { term: ta }),
    )
    .await
    .expect("campaign task alive");
    // a campaigns again: the next term goes to a or b, and is larger either way.
    let next = tokio::select! {
        t = a.until_leader() => t,
        t = b.until_leader() => t,
    };
    if let (Some(ta), Some(next)) = (ta, next) {
        assert!(next > ta, "term {next} after {ta}");
    }
    let (ra, rb) = tokio::join!(a.resign(), b.resign());
    ra.expect("resign a");
    rb.expect("resign b");
}

/// 5. Observers read the leader's identity, and never a former leader's once another leads or
///    nobody does; without notes they get a typed `Unsupported`.
pub async fn leader_observers_read_identity<F: Factory + ?Sized>(f: &F) {
    let label = f.label();
    let name = key("observe");
    let observer_client = f.client().await;
    let observer = LeaderElection::new(&observer_client.locker(), &name, "observer").expect("observer");
    if observer_client.backend.notes().is_none() {
        let e = observer.leader().await.expect_err("no notes");
        assert!(matches!(e, LockError::Unsupported { .. }), "{e:?}");
        return skip(&label, "leader_observers_read_identity", "the backend has no notes");
    }
    assert_eq!(observer.leader().await.expect("leader"), None, "nobody campaigns yet");
    let (ea, _) = member(f, &name, "node-a:7000").await;
    let (eb, _) = member(f, &name, "node-b:7000").await;
    let a = ea.campaign().expect("campaign a");
    lead(&a, "a to lead").await;
    assert_eq!(observer.leader().await.expect("leader").as_deref(), Some("node-a:7000"));
    let b = eb.campaign().expect("campaign b");
    a.resign().await.expect("resign a");
    lead(&b, "b to lead").await;
    // The note is written just after the grant: b leads once it is there (see `win`).
    assert_eq!(observer.leader().await.expect("leader").as_deref(), Some("node-b:7000"));
    b.resign().await.expect("resign b");
    assert_eq!(observer.leader().await.expect("leader"), None, "a former leader's identity after resigning");
}

/// 6. Bad input is a typed error: a bad name, an identity too long or with control characters,
///    a lease out of range.
pub async fn leader_bad_input_is_typed<F: Factory + ?Sized>(f: &F) {
    let locker = f.client().await.locker();
    let bad = LeaderElection::new(&locker, "", "a").expect_err("empty name");
    assert!(matches!(bad, LockError::InvalidKey { .. }), "{bad:?}");
    let bad = LeaderElection::new(&locker, "k".repeat(256), "a").expect_err("long name");
    assert!(matches!(bad, LockError::InvalidKey { .. }), "{bad:?}");
    let bad = LeaderElection::new(&locker, key("bad"), "line\nbreak").expect_err("control character");
    assert!(matches!(bad, LockError::InvalidConfig { .. }), "{bad:?}");
    let long = "x".repeat(lock_core::backend::MAX_NOTE_BYTES + 1);
    let bad = LeaderElection::new(&locker, key("bad"), long).expect_err("long identity");
    assert!(matches!(bad, LockError::InvalidConfig { .. }), "{bad:?}");
    let e = LeaderElection::new(&locker, key("bad"), "a").expect("valid");
    for lease in [Duration::ZERO, Duration::from_millis(1), Duration::MAX] {
        let bad = e.clone().lease(lease).expect_err("lease out of range");
        assert!(matches!(bad, LockError::InvalidLease { .. }), "{bad:?}");
    }
}

/// Expand the leader suite into one `#[tokio::test]` per case (see
/// [`primitive_tests!`](crate::primitive_tests)).
#[macro_export]
macro_rules! leader_tests {
    ($factory:expr) => {
        $crate::leader_tests!(@cases $factory; leader_one_at_a_time_under_churn, leader_resignation_hands_over,
            leader_told_before_successor, leader_severed_leader_steps_down, leader_observers_read_identity,
            leader_bad_input_is_typed);
    };
    (@cases $factory:expr; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let factory = $factory;
                $crate::primitives::leader::$case(&factory).await;
            }
        )*
    };
}
