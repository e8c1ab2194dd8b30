//! The toolkit against a driver whose server answers at once, or never.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use super::*;
use crate::backend::{AcquireRequest, Attempt, Side, session_give_up};
use crate::{LeaseSignal, LeaseState, LockError, LostReason, OwnerToken};

const EVERY: Duration = Duration::from_millis(100);
const IDLE: Duration = Duration::from_secs(2);

/// A server that answers every request at once, or (`silent`) none.
#[derive(Default)]
struct Stats {
    silent: AtomicBool,
    pings: AtomicU32,
    ends: AtomicU32,
}

/// The driver, sharing its [`Stats`] with the test.
#[derive(Default)]
struct Fake(Arc<Stats>);

/// A holding connection; dropped without a clean end it is "closed".
struct Conn {
    closed: Arc<AtomicBool>,
    clean: bool,
}

impl Drop for Conn {
    fn drop(&mut self) {
        if !self.clean {
            self.closed.store(true, Ordering::SeqCst);
        }
    }
}

impl Fake {
    async fn answer(&self) -> Result<(), &'static str> {
        if self.0.silent.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
        Ok(())
    }
}

impl SessionDriver for Fake {
    type Held = Conn;
    type Error = &'static str;

    fn name(&self) -> &'static str {
        "fake"
    }

    async fn ping(&self, _: &mut Conn) -> Result<(), &'static str> {
        self.0.pings.fetch_add(1, Ordering::SeqCst);
        self.answer().await
    }

    async fn end(&self, _: &str, mut held: Conn, _: Ending) -> Result<bool, &'static str> {
        self.0.ends.fetch_add(1, Ordering::SeqCst);
        self.answer().await?;
        held.clean = true;
        Ok(true)
    }

    async fn note(&self, _: &str, _: &mut Conn, _: &str, link: &mut Link<'_>) -> Noted {
        match link.send(self.answer()).await {
            Some(Ok(())) => Noted::Answered(Ok(true)),
            _ => Noted::Lost,
        }
    }

    fn connection_lost(&self, _: &&'static str) -> bool {
        false
    }

    fn classify(&self, e: &'static str) -> LockError {
        LockError::temporary("fake", e)
    }
}

struct Setup {
    sessions: Sessions<Fake>,
    stats: Arc<Stats>,
    signal: LeaseSignal,
    owner: OwnerToken,
    closed: Arc<AtomicBool>,
}

impl Setup {
    fn new() -> Self {
        let stats = Arc::<Stats>::default();
        Setup {
            sessions: Sessions::new(Fake(stats.clone()), EVERY, IDLE),
            stats,
            signal: LeaseSignal::new(),
            owner: OwnerToken::random(),
            closed: Arc::default(),
        }
    }

    fn req(&self) -> AcquireRequest<'_> {
        AcquireRequest {
            key: "k",
            owner: self.owner,
            lease: IDLE,
            wait_until: None,
            signal: &self.signal,
            side: Side::Exclusive,
        }
    }

    /// A grant sent at `sent` and, after a wait, answered at `answered`.
    async fn hold(&self, sent: Instant, answered: Option<Instant>) -> crate::Result<Attempt> {
        let held = Conn { closed: self.closed.clone(), clean: false };
        self.sessions.hold(&self.req(), Granted { held, session: 7, fence: 3, sent, answered }).await
    }

    fn silence(&self) {
        self.stats.silent.store(true, Ordering::SeqCst);
    }
}

/// Sleep until just before, then just after, `at`, and return the signal's states then.
async fn around(s: &Setup, at: Instant) -> (LeaseState, LeaseState) {
    tokio::time::sleep_until(at - Duration::from_millis(2)).await;
    let before = s.signal.state();
    tokio::time::sleep_until(at + Duration::from_millis(2)).await;
    (before, s.signal.state())
}

#[tokio::test(start_paused = true)]
async fn a_silent_server_makes_the_hold_uncertain_then_lost_from_the_last_confirmed_send() {
    let s = Setup::new();
    let sent = Instant::now();
    assert!(matches!(s.hold(sent, None).await, Ok(Attempt::Acquired(_))));
    // The first ping, one period after the grant's send, is answered.
    tokio::time::sleep_until(sent + EVERY + Duration::from_millis(1)).await;
    assert_eq!(s.stats.pings.load(Ordering::SeqCst), 1);
    let confirmed = sent + EVERY;
    s.silence();
    // The next ping (one period later) goes unanswered for one more period: uncertain.
    assert_eq!(around(&s, confirmed + 2 * EVERY).await, (LeaseState::Held, LeaseState::Uncertain));
    // Lost at the last confirmed ping's send plus the idle bound less the drift margin.
    let give_up = session_give_up(confirmed, IDLE);
    let lost = LeaseState::Lost(LostReason::SessionEnded);
    assert_eq!(around(&s, give_up).await, (LeaseState::Uncertain, lost));
    assert!(s.closed.load(Ordering::SeqCst), "the connection of a lost hold is closed");
    assert_eq!(s.sessions.held_session("k"), None);
    assert!(s.sessions.reenter("k", s.owner, &s.signal).is_none(), "never nest into a lost hold");
    assert!(!s.sessions.release("k", s.owner).await.expect("release"));
}

/// The guards read the session's deadline by themselves: a holder whose keeper is starved of CPU
/// (not run at the deadline) still reads the hold lost when the server may have ended it.
#[tokio::test(start_paused = true)]
async fn the_guards_read_the_sessions_deadline_without_the_keeper() {
    let s = Setup::new();
    let sent = Instant::now();
    assert!(matches!(s.hold(sent, None).await, Ok(Attempt::Acquired(_))));
    assert_eq!(s.signal.deadline(), Some(session_give_up(sent, IDLE)));
    // A nesting through another `Locker` brings its own signal, tied to the same deadline.
    let nested = LeaseSignal::new();
    assert!(s.sessions.reenter("k", s.owner, &nested).is_some());
    tokio::time::sleep_until(sent + EVERY + Duration::from_millis(1)).await;
    assert_eq!(s.stats.pings.load(Ordering::SeqCst), 1);
    let give_up = session_give_up(sent + EVERY, IDLE);
    assert_eq!((s.signal.deadline(), nested.deadline()), (Some(give_up), Some(give_up)));
}

#[tokio::test(start_paused = true)]
async fn a_grant_after_a_short_wait_counts_from_the_waiting_send() {
    let s = Setup::new();
    let wait_sent = Instant::now();
    tokio::time::sleep(EVERY / 2).await;
    s.silence();
    assert!(matches!(s.hold(wait_sent, Some(Instant::now())).await, Ok(Attempt::Acquired(_))));
    assert_eq!(s.stats.pings.load(Ordering::SeqCst), 0, "no confirming ping");
    let lost = LeaseState::Lost(LostReason::SessionEnded);
    assert_eq!(around(&s, session_give_up(wait_sent, IDLE)).await, (LeaseState::Uncertain, lost));
}

#[tokio::test(start_paused = true)]
async fn a_grant_after_a_long_wait_is_confirmed_by_a_ping_first() {
    let s = Setup::new();
    let wait_sent = Instant::now();
    tokio::time::sleep(EVERY * 3).await;
    assert!(matches!(s.hold(wait_sent, Some(Instant::now())).await, Ok(Attempt::Acquired(_))));
    assert_eq!(s.stats.pings.load(Ordering::SeqCst), 1);

    let s = Setup::new();
    let wait_sent = Instant::now();
    tokio::time::sleep(EVERY * 3).await;
    s.silence();
    let pinged = Instant::now();
    let err = s.hold(wait_sent, Some(pinged)).await.expect_err("unconfirmed");
    assert!(err.is_temporary());
    assert_eq!(Instant::now(), session_give_up(pinged, IDLE));
    assert!(s.closed.load(Ordering::SeqCst));
    assert_eq!(s.sessions.held_session("k"), None);
}

#[tokio::test(start_paused = true)]
async fn nesting_is_counted_here_and_the_last_release_ends_the_hold_once() {
    let s = Setup::new();
    s.hold(Instant::now(), None).await.expect("hold");
    let nested = LeaseSignal::new();
    assert_eq!(s.sessions.reenter("k", s.owner, &nested).map(|f| f.0), Some(3));
    assert!(s.sessions.reenter("k", OwnerToken::random(), &nested).is_none());
    assert!(s.sessions.release("k", s.owner).await.expect("release"));
    assert_eq!(s.stats.ends.load(Ordering::SeqCst), 0);
    assert!(s.sessions.release("k", s.owner).await.expect("release"));
    assert_eq!(s.stats.ends.load(Ordering::SeqCst), 1);
    assert!(!s.closed.load(Ordering::SeqCst), "a clean end keeps the connection");
    assert!(!s.sessions.release("k", s.owner).await.expect("release"));
}

#[tokio::test(start_paused = true)]
async fn an_unanswered_release_is_given_up_with_the_hold() {
    let s = Setup::new();
    let sent = Instant::now();
    s.hold(sent, None).await.expect("hold");
    s.silence();
    let err = s.sessions.release("k", s.owner).await.expect_err("no answer");
    assert!(err.is_temporary());
    assert_eq!(Instant::now(), session_give_up(sent, IDLE));
    assert_eq!(s.signal.state(), LeaseState::Lost(LostReason::SessionEnded));
    assert!(s.closed.load(Ordering::SeqCst));
}

#[tokio::test(start_paused = true)]
async fn renewals_and_notes_go_through_the_keeper_and_confirm_the_hold() {
    let s = Setup::new();
    s.hold(Instant::now(), None).await.expect("hold");
    let renew = [crate::backend::RenewItem { key: "k", owner: s.owner, lease: IDLE }];
    assert_eq!(s.sessions.renew(&renew).await.expect("renew"), vec![true]);
    assert!(s.sessions.set_note("k", s.owner, "n").await.expect("note"));
    assert!(!s.sessions.set_note("k", OwnerToken::random(), "n").await.expect("note"));
    let stranger = [crate::backend::RenewItem { key: "k", owner: OwnerToken::random(), lease: IDLE }];
    assert_eq!(s.sessions.renew(&stranger).await.expect("renew"), vec![false]);
}

#[tokio::test(start_paused = true)]
async fn a_dropped_backend_ends_its_holds() {
    let s = Setup::new();
    s.hold(Instant::now(), None).await.expect("hold");
    let Setup { sessions, stats, closed, .. } = s;
    drop(sessions);
    tokio::time::sleep(EVERY / 10).await;
    assert_eq!(stats.ends.load(Ordering::SeqCst), 1);
    assert!(!closed.load(Ordering::SeqCst), "ended cleanly, not closed");
}

/// A shared hold takes no note (its fence is the latest writer's: a note would pass for the
/// writer's), on every session-bound backend, decided here once; its renewal still works.
#[tokio::test(start_paused = true)]
async fn a_shared_hold_takes_no_note() {
    let s = Setup::new();
    let held = Conn { closed: s.closed.clone(), clean: false };
    let req = AcquireRequest { side: Side::Read, ..s.req() };
    let g = Granted { held, session: 7, fence: 3, sent: Instant::now(), answered: None };
    s.sessions.hold(&req, g).await.expect("hold");
    assert!(!s.sessions.set_note("k", s.owner, "n").await.expect("note"), "a reader's note");
    let renew = [crate::backend::RenewItem { key: "k", owner: s.owner, lease: IDLE }];
    assert_eq!(s.sessions.renew(&renew).await.expect("renew"), vec![true]);
}
