//! A model of one hold's lease, checked exhaustively for small sizes (stateright): the holder's
//! watchdog against a server that frees the key at its own deadline, while another client asks
//! for the key. The network delays, loses and repeats requests and answers at will; the
//! holder's clock runs up to `DRIFT_MARGIN_RATE` fast or slow. The holder's steps are the
//! code's: its local deadline is [`local_deadline`] from the granting or renewing request's
//! send, with the margin of [`drift_margin`], renewed every [`period`], and a confirmed
//! renewal only ever moves the deadline later (`Entry::extend`).
//!
//! The property: once the other client is granted the key, the holder no longer believes it
//! holds it (its own clock is past its deadline, or a renewal was refused). The same model with
//! the deadline counted from the answer's arrival, a fix this code once needed, breaks it, and
//! the checker prints the steps.
//!
//! Run: `cargo test -p lock-core --lib renewer::model -- --nocapture`.

use std::time::Duration;

use stateright::{Checker, HasDiscoveries, Model, Property};
use tokio::time::Instant;

use super::lease::{local_deadline, period};
use crate::{DRIFT_MARGIN_FLOOR, DRIFT_MARGIN_RATE, drift_margin, model_kit};

/// Milliseconds of real time (the server's clock) or of the holder's clock.
type Ms = u64;

const LEASE: Ms = 100;
/// Time moves in steps this long; every event happens between steps.
const STEP: Ms = 10;
/// Nothing happens after this.
const HORIZON: Ms = 160;
/// Requests and answers on their way at once, at most.
const IN_FLIGHT: usize = 2;

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Acquire,
    Renew,
}

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
enum Msg {
    /// To the server, sent at the holder's local time.
    Request(Kind, Ms),
    /// To the holder: the request sent at that local time was applied (or refused).
    Answer(Kind, Ms, bool),
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct State {
    now: Ms,
    /// The holder's clock runs `1 + drift_ppm / 1e6` times as fast as the server's.
    drift_ppm: i64,
    /// The server: whether the holder has the key, until when (its own clock).
    held_until: Option<Ms>,
    /// The holder: its local deadline (once granted), its next renewal, told lost.
    deadline: Option<Ms>,
    next_due: Ms,
    told_lost: bool,
    asked: bool,
    /// The other client's grant, by the server's clock.
    successor: Option<Ms>,
    net: Vec<Msg>,
    /// One repeat of a request per run (a driver sending a command twice).
    repeated: bool,
}

impl State {
    fn local(&self) -> Ms {
        model_kit::local(self.now, self.drift_ppm)
    }

    fn believes_it_holds(&self) -> bool {
        !self.told_lost && self.deadline.is_some_and(|d| self.local() < d)
    }

    fn send(&mut self, m: Msg) {
        self.net.push(m);
        self.net.sort();
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
enum Action {
    Tick,
    Send(Kind),
    Deliver(Msg),
    Repeat(Msg),
    Lose(Msg),
    Successor,
}

/// The lease protocol; `from_answer` counts the deadline from the answer's arrival instead of
/// the request's send (the fix reverted).
struct Lease {
    base: Instant,
    margin: Duration,
    from_answer: bool,
}

impl Lease {
    /// The code's protocol.
    fn new() -> Self {
        let margin = drift_margin(Duration::from_millis(LEASE), DRIFT_MARGIN_RATE, DRIFT_MARGIN_FLOOR);
        Lease { base: Instant::now(), margin, from_answer: false }
    }

    /// The code's local deadline of a lease confirmed by a request sent at `sent` (local ms).
    fn deadline(&self, sent: Ms) -> Ms {
        let d = local_deadline(
            self.base + Duration::from_millis(sent),
            Duration::from_millis(LEASE),
            self.margin,
        );
        (d - self.base).as_millis() as Ms
    }

    fn confirmed(&self, s: &mut State, sent: Ms) {
        let from = if self.from_answer { s.local() } else { sent };
        let d = self.deadline(from);
        // `Entry::extend`: the deadline only ever moves later.
        s.deadline = Some(s.deadline.map_or(d, |old| old.max(d)));
        s.next_due = sent + period(Duration::from_millis(LEASE)).as_millis() as Ms;
    }

    fn serve(&self, s: &mut State, kind: Kind, sent: Ms) {
        let live = s.held_until.is_some_and(|u| s.now < u);
        let ok = match kind {
            Kind::Acquire => s.successor.is_none() && (live || s.held_until.is_none()),
            Kind::Renew => live,
        };
        if ok {
            s.held_until = Some(s.now + LEASE);
        }
        s.send(Msg::Answer(kind, sent, ok));
    }
}

impl Model for Lease {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        model_kit::drifts()
            .into_iter()
            .map(|drift_ppm| State {
                now: 0,
                drift_ppm,
                held_until: None,
                deadline: None,
                next_due: 0,
                told_lost: false,
                asked: false,
                successor: None,
                net: Vec::new(),
                repeated: false,
            })
            .collect()
    }

    fn actions(&self, s: &State, out: &mut Vec<Action>) {
        if s.now < HORIZON {
            out.push(Action::Tick);
        }
        if s.net.len() < IN_FLIGHT {
            if !s.asked {
                out.push(Action::Send(Kind::Acquire));
            } else if s.believes_it_holds() && s.local() >= s.next_due {
                out.push(Action::Send(Kind::Renew));
            }
        }
        for &m in &s.net {
            out.push(Action::Deliver(m));
            out.push(Action::Lose(m));
            if matches!(m, Msg::Request(..)) && !s.repeated {
                out.push(Action::Repeat(m));
            }
        }
        if s.successor.is_none() && s.held_until.is_none_or(|u| u <= s.now) {
            out.push(Action::Successor);
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = last.clone();
        match action {
            Action::Tick => s.now += STEP,
            Action::Send(kind) => {
                s.asked = true;
                let sent = s.local();
                if kind == Kind::Renew {
                    // Sent once per period: the next one is due a period after this send.
                    s.next_due = sent + period(Duration::from_millis(LEASE)).as_millis() as Ms;
                }
                s.send(Msg::Request(kind, sent));
            }
            Action::Deliver(m) | Action::Repeat(m) => {
                if let Action::Deliver(_) = action {
                    let i = s.net.iter().position(|x| *x == m)?;
                    s.net.remove(i);
                } else {
                    s.repeated = true;
                }
                match m {
                    Msg::Request(kind, sent) => self.serve(&mut s, kind, sent),
                    Msg::Answer(_, sent, true) => self.confirmed(&mut s, sent),
                    Msg::Answer(Kind::Renew, _, false) => s.told_lost = true,
                    Msg::Answer(Kind::Acquire, _, false) => {}
                }
            }
            Action::Lose(m) => {
                let i = s.net.iter().position(|x| *x == m)?;
                s.net.remove(i);
            }
            Action::Successor => {
                s.successor = Some(s.now);
                s.held_until = None;
            }
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![Property::always("told lost before the successor's grant", |_, s: &State| {
            s.successor.is_none() || !s.believes_it_holds()
        })]
    }
}

fn check(model: Lease) -> impl Checker<Lease> {
    model_kit::check("lease model", model, HasDiscoveries::All)
}

#[test]
fn the_holder_knows_it_lost_before_a_successor_is_granted() {
    let c = check(Lease::new());
    c.assert_properties();
    assert!(c.unique_state_count() > 10_000, "the model explored too little");
}

/// The counterexample the checker finds for `model`, as its steps.
fn counterexample(model: Lease) -> String {
    let c = check(model);
    let path = c.discovery("told lost before the successor's grant").expect("a counterexample");
    let steps = path.into_vec();
    let clock = steps.first().map_or(0, |(s, _)| s.drift_ppm);
    let steps: Vec<String> = steps.into_iter().filter_map(|(_, a)| a.map(|a| format!("{a:?}"))).collect();
    format!("holder's clock {clock:+} ppm: {}", steps.join(" -> "))
}

#[test]
fn counted_from_the_answer_the_holder_outlives_its_lease() {
    let steps = counterexample(Lease { from_answer: true, ..Lease::new() });
    println!("deadline counted from the answer: {steps}");
}

#[test]
fn without_the_drift_margin_a_slow_clock_outlives_its_lease() {
    let steps = counterexample(Lease { margin: Duration::ZERO, ..Lease::new() });
    println!("no drift margin: {steps}");
}
