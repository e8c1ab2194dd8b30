//! The session-bound hold (PostgreSQL, MySQL, the file store's keeper), model-checked
//! (stateright): a hold lives as long as its server session, which the server ends once it has
//! been idle for its bound; the client's keeper pings every keep-alive period, and the holder
//! is told lost at the last confirmed send plus the bound less the drift margin
//! ([`session_give_up`](crate::backend::session_give_up)). A grant that came after a wait counts
//! from the waiting statement's send, or is confirmed by a ping first when it took longer than a
//! period ([`waited_grant_anchor`](crate::backend::waited_grant_anchor)). The network delays
//! and loses anything (a cut link, a slow one); the holder's clock runs 1 % fast, exact or 1 %
//! slow.
//!
//! The property: once the server ended the session and another client was granted the lock,
//! the holder no longer believes it holds it. Counting a waited grant from its arrival (the
//! fix of bebf405b reverted) breaks it, and the checker prints the steps.
//!
//! Run: `cargo test -p lock-core --lib session::model -- --nocapture`.

use std::time::Duration;

use stateright::{Checker, HasDiscoveries, Model, Property};
use tokio::time::Instant;

use crate::backend::{session_give_up, waited_grant_anchor};
use crate::model_kit;

type Ms = u64;

/// The server's idle bound, and the keeper's period.
const IDLE: Ms = 100;
const EVERY: Ms = 30;
const STEP: Ms = 10;
const HORIZON: Ms = 200;
const IN_FLIGHT: usize = 2;

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
enum Msg {
    /// To the server, sent at the holder's local time: the waiting lock statement, a ping.
    Wait(Ms),
    Ping(Ms),
    /// To the holder: the grant of the wait sent then; a ping's answer (the session alive).
    Granted(Ms),
    Pong(Ms, bool),
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct State {
    now: Ms,
    drift_ppm: i64,
    /// The server: the session's last activity (its idle clock's start), whether it ended.
    last_active: Option<Ms>,
    ended: bool,
    /// The holder: asked; granted and its anchor (the last confirmed send); the pending
    /// confirmation of a long wait; the next ping; told lost.
    asked: bool,
    granted: bool,
    confirmed: Option<Ms>,
    next_ping: Ms,
    told_lost: bool,
    successor: bool,
    net: Vec<Msg>,
}

impl State {
    fn local(&self) -> Ms {
        model_kit::local(self.now, self.drift_ppm)
    }

    fn send(&mut self, m: Msg) {
        self.net.push(m);
        self.net.sort();
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
enum Action {
    Tick,
    Wait,
    Ping,
    Deliver(Msg),
    Lose(Msg),
    Successor,
}

struct Session {
    base: Instant,
    /// The fix reverted: a waited grant counts from its arrival.
    from_arrival: bool,
}

impl Session {
    fn at(&self, ms: Ms) -> Instant {
        self.base + Duration::from_millis(ms)
    }

    fn ms(&self, t: Instant) -> Ms {
        (t - self.base).as_millis() as Ms
    }

    /// The code's give-up time of a hold last confirmed by a send at `confirmed` (local ms).
    fn give_up(&self, confirmed: Ms) -> Ms {
        self.ms(session_give_up(self.at(confirmed), Duration::from_millis(IDLE)))
    }

    fn believes(&self, s: &State) -> bool {
        !s.told_lost && s.confirmed.is_some_and(|c| s.local() < self.give_up(c))
    }

    fn confirm(&self, s: &mut State, sent: Ms) {
        let c = s.confirmed.map_or(sent, |old| old.max(sent));
        s.confirmed = Some(c);
        s.next_ping = s.next_ping.max(sent + EVERY);
    }
}

impl Model for Session {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        model_kit::drifts()
            .into_iter()
            .map(|drift_ppm| State {
                now: 0,
                drift_ppm,
                last_active: None,
                ended: false,
                asked: false,
                granted: false,
                confirmed: None,
                next_ping: 0,
                told_lost: false,
                successor: false,
                net: Vec::new(),
            })
            .collect()
    }

    fn actions(&self, s: &State, out: &mut Vec<Action>) {
        if s.now < HORIZON {
            out.push(Action::Tick);
        }
        let room = s.net.len() < IN_FLIGHT;
        if room && !s.asked {
            out.push(Action::Wait);
        }
        // The keeper's ping, due a period after the last confirmed one (or the confirming ping
        // of a long wait's grant), until the hold is given up.
        let due = s.granted && !s.told_lost && s.local() >= s.next_ping;
        if room && due && s.confirmed.is_none_or(|c| s.local() < self.give_up(c)) {
            out.push(Action::Ping);
        }
        for &m in &s.net {
            out.push(Action::Deliver(m));
            out.push(Action::Lose(m));
        }
        if !s.successor && s.ended {
            out.push(Action::Successor);
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = last.clone();
        match action {
            Action::Tick => {
                s.now += STEP;
                // The server ends a session idle for its bound, and frees its lock.
                if s.last_active.is_some_and(|a| s.now >= a + IDLE) {
                    s.ended = true;
                }
                // The keeper gives the hold up at its deadline.
                if s.confirmed.is_some_and(|c| s.local() >= self.give_up(c)) {
                    s.told_lost = true;
                }
            }
            Action::Wait => {
                s.asked = true;
                let sent = s.local();
                s.send(Msg::Wait(sent));
            }
            Action::Ping => {
                let sent = s.local();
                s.next_ping = sent + EVERY;
                s.send(Msg::Ping(sent));
            }
            Action::Deliver(m) => {
                let i = s.net.iter().position(|x| *x == m)?;
                s.net.remove(i);
                match m {
                    // The wait is granted now (the lock was free, or freed while it waited):
                    // the server's idle clock starts when it sends the grant.
                    Msg::Wait(sent) if !s.ended && s.last_active.is_none() => {
                        s.last_active = Some(s.now);
                        s.send(Msg::Granted(sent));
                    }
                    Msg::Wait(_) => {}
                    Msg::Ping(sent) => {
                        let alive = !s.ended;
                        if alive {
                            s.last_active = Some(s.now);
                        }
                        s.send(Msg::Pong(sent, alive));
                    }
                    Msg::Granted(wait_sent) => {
                        s.granted = true;
                        let arrived = s.local();
                        let anchor = if self.from_arrival {
                            Some(arrived)
                        } else {
                            waited_grant_anchor(
                                self.at(wait_sent),
                                self.at(arrived),
                                Duration::from_millis(EVERY),
                            )
                            .map(|t| self.ms(t))
                        };
                        match anchor {
                            Some(a) => self.confirm(&mut s, a),
                            // Handed out only once a ping sent now is answered.
                            None => s.next_ping = arrived,
                        }
                    }
                    Msg::Pong(sent, true) => self.confirm(&mut s, sent),
                    Msg::Pong(_, false) => s.told_lost = true,
                }
            }
            Action::Lose(m) => {
                let i = s.net.iter().position(|x| *x == m)?;
                s.net.remove(i);
            }
            Action::Successor => s.successor = true,
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("told lost before the successor's grant", |m: &Session, s: &State| {
                !s.successor || !m.believes(s)
            }),
            Property::sometimes("a successor after a hold", |_, s: &State| {
                s.successor && s.confirmed.is_some()
            }),
        ]
    }
}

fn check(model: Session) -> impl Checker<Session> {
    model_kit::check("session model", model, HasDiscoveries::All)
}

#[test]
fn the_holder_knows_its_session_ended_before_a_successor_is_granted() {
    let c = check(Session { base: Instant::now(), from_arrival: false });
    c.assert_properties();
}

#[test]
fn counted_from_its_arrival_a_waited_grant_outlives_its_session() {
    let c = check(Session { base: Instant::now(), from_arrival: true });
    let path = c.discovery("told lost before the successor's grant").expect("a counterexample");
    let steps: Vec<String> = path.into_actions().iter().map(|a| format!("{a:?}")).collect();
    println!("anchored at the arrival: {}", steps.join(" -> "));
}

/// The model is the code: the requests a session-bound hold makes on its connection are the
/// driver's, and the model takes the one that keeps the session (the ping) and the wait's
/// grant; a method added to `SessionDriver` fails here until the model takes it or says why
/// not.
#[test]
fn the_model_takes_the_drivers_requests() {
    // `end` frees the hold (nothing to keep after it); `note` is a request bounded like a
    // ping whose answer confirms the session the same way (Link); the others send nothing
    // (`classify` sorts an error, `connection_lost` tells a closed link).
    const ACCOUNTED: [&str; 6] = ["ping", "end", "note", "name", "connection_lost", "classify"];
    let src = include_str!("driver.rs");
    let body =
        src.split("pub trait SessionDriver").nth(1).and_then(|t| t.split("\n}\n").next()).expect("the trait");
    let methods: Vec<&str> = body
        .lines()
        .filter_map(|l| l.trim().strip_prefix("async fn ").or_else(|| l.trim().strip_prefix("fn ")))
        .filter_map(|l| l.split(['(', '<']).next())
        .collect();
    assert!(methods.contains(&"ping"), "the driver's methods were not found: {methods:?}");
    for m in &methods {
        assert!(ACCOUNTED.contains(m), "SessionDriver::{m} is not accounted for by the model");
    }
}
