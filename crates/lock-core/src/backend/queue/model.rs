//! The predecessor-queue recipe of etcd and ZooKeeper, model-checked (stateright): clients
//! take the steps of [`first`](super::first) through a [`QueueStore`](super::QueueStore)
//! (enqueue, watch, deleted, look, leave, hold) and of the release, and place themselves with
//! the recipe's own [`place_behind`]; the server keeps the queue of entries in creation order
//! with one watch per waiter. Faults: a session expires (its entries go; its client is told
//! lost at once, which the lease model, `renewer::model`, shows the keeper does in time), a
//! watch's notification is lost (the waiter's wait then ends at its deadline), a wait ends.
//!
//! Properties: never a writer together with another holder; once every client is done, the
//! queue is empty (no entry left behind to block the key); and the model reaches a grant after
//! a wait (so that it is not vacuous).
//!
//! Run: `cargo test -p lock-core --lib queue::model -- --nocapture`.

use stateright::{Checker, HasDiscoveries, Model, Property};

use super::{Place, place_behind};
use crate::backend::Side;

/// One client's operations, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Op {
    Write,
    Read,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Entry {
    seq: u8,
    client: usize,
    reader: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Phase {
    /// Not started (or done: `op` past the program).
    Idle,
    /// The create is on its way (`QueueStore::enqueue`).
    Enqueuing,
    /// A watch on this predecessor is on its way (`QueueStore::watch`).
    Watching(u8),
    /// Armed on this predecessor: waiting for its deletion (`QueueStore::deleted`).
    Armed(u8),
    /// A read of its place is on its way (`QueueStore::look`).
    Looking,
    Holding,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Client {
    op: usize,
    phase: Phase,
    /// Its entry, once created.
    entry: Option<u8>,
    /// A grant came after a wait.
    waited: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Msg {
    /// The server's answer to an enqueue (the entry, and the entries ahead of it), a watch (the
    /// predecessor still there: armed; else the entries ahead now), a look.
    Created {
        client: usize,
        seq: u8,
        ahead: Vec<Entry>,
    },
    Armed {
        client: usize,
    },
    Moved {
        client: usize,
        ahead: Vec<Entry>,
    },
    Ahead {
        client: usize,
        ahead: Vec<Entry>,
    },
    /// The watched entry was deleted.
    Deleted {
        client: usize,
    },
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct State {
    queue: Vec<Entry>,
    next_seq: u8,
    /// Watches: (watcher, watched entry).
    watches: Vec<(usize, u8)>,
    clients: Vec<Client>,
    net: Vec<Msg>,
    faults: u8,
    broken: Option<String>,
    waited_grant: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Action {
    Step(usize),
    Deliver(usize),
    /// Faults: a notification lost, a session expired, a wait that ends at its deadline.
    LoseNotification(usize),
    Expire(usize),
    GiveUp(usize),
}

/// The recipe, with `reverted`: a waiter woken by its predecessor's deletion holds at once
/// instead of looking again (the classic mistake the recipe's `look` avoids).
struct Recipe {
    programs: Vec<Vec<Op>>,
    faults: u8,
    hold_when_woken: bool,
}

fn side(op: Op) -> Side {
    match op {
        Op::Write => Side::Write,
        Op::Read => Side::Read,
    }
}

impl Recipe {
    fn ahead(s: &State, seq: u8) -> Vec<Entry> {
        s.queue.iter().filter(|e| e.seq < seq).cloned().collect()
    }

    fn send(s: &mut State, m: Msg) {
        s.net.push(m);
    }

    /// Deletes entry `seq` and notifies its watchers.
    fn delete(s: &mut State, seq: u8) {
        s.queue.retain(|e| e.seq != seq);
        let watchers: Vec<usize> = s.watches.iter().filter(|w| w.1 == seq).map(|w| w.0).collect();
        s.watches.retain(|w| w.1 != seq);
        for client in watchers {
            Self::send(s, Msg::Deleted { client });
        }
    }

    /// The client's entry stands behind `ahead`: hold, or watch what `place_behind` names.
    fn placed(&self, s: &mut State, c: usize, ahead: &[Entry]) {
        let op = self.programs[c][s.clients[c].op];
        match place_behind(ahead, side(op), |e| e.reader) {
            Place::Head => {
                s.clients[c].phase = Phase::Holding;
                s.waited_grant |= s.clients[c].waited;
            }
            Place::Behind(p) => {
                s.clients[c].phase = Phase::Watching(p.seq);
                s.clients[c].waited = true;
            }
        }
    }

    /// The client's acquisition or hold ends: its entry goes (`leave`, or the release).
    fn finish(s: &mut State, c: usize) {
        let cl = &mut s.clients[c];
        let entry = cl.entry.take();
        (cl.op, cl.phase, cl.waited) = (cl.op + 1, Phase::Idle, false);
        s.watches.retain(|w| w.0 != c);
        if let Some(seq) = entry {
            Self::delete(s, seq);
        }
    }

    fn holder(&self, s: &State, c: usize) -> Option<Op> {
        let cl = &s.clients[c];
        (cl.phase == Phase::Holding).then(|| self.programs[c][cl.op])
    }
}

impl Model for Recipe {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let client = Client { op: 0, phase: Phase::Idle, entry: None, waited: false };
        vec![State {
            queue: Vec::new(),
            next_seq: 1,
            watches: Vec::new(),
            clients: vec![client; self.programs.len()],
            net: Vec::new(),
            faults: self.faults,
            broken: None,
            waited_grant: false,
        }]
    }

    fn actions(&self, s: &State, out: &mut Vec<Action>) {
        if s.broken.is_some() {
            return;
        }
        for (c, cl) in s.clients.iter().enumerate() {
            let in_flight = s.net.iter().any(|m| msg_client(m) == c);
            match cl.phase {
                Phase::Idle if cl.op < self.programs[c].len() => out.push(Action::Step(c)),
                Phase::Watching(_) | Phase::Holding if !in_flight => out.push(Action::Step(c)),
                Phase::Armed(_) if !in_flight && s.faults > 0 => out.push(Action::GiveUp(c)),
                _ => {}
            }
            if s.faults > 0 && s.queue.iter().any(|e| e.client == c) {
                out.push(Action::Expire(c));
            }
        }
        for (i, m) in s.net.iter().enumerate() {
            out.push(Action::Deliver(i));
            if s.faults > 0 && matches!(m, Msg::Deleted { .. }) {
                out.push(Action::LoseNotification(i));
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = last.clone();
        match action {
            Action::Step(c) => match s.clients[c].phase {
                // `enqueue`: the create and the read of the entries ahead, one request.
                Phase::Idle => {
                    let (seq, reader) = (s.next_seq, self.programs[c][s.clients[c].op] == Op::Read);
                    s.next_seq += 1;
                    s.queue.push(Entry { seq, client: c, reader });
                    s.clients[c].phase = Phase::Enqueuing;
                    let ahead = Self::ahead(&s, seq);
                    Self::send(&mut s, Msg::Created { client: c, seq, ahead });
                }
                // `watch`: armed if the predecessor is still there, else the queue moved.
                Phase::Watching(p) => {
                    let own = s.clients[c].entry?;
                    if s.queue.iter().any(|e| e.seq == p) {
                        s.watches.push((c, p));
                        s.clients[c].phase = Phase::Armed(p);
                        Self::send(&mut s, Msg::Armed { client: c });
                    } else {
                        let ahead = Self::ahead(&s, own);
                        Self::send(&mut s, Msg::Moved { client: c, ahead });
                    }
                }
                // The release: the entry goes.
                Phase::Holding => Self::finish(&mut s, c),
                _ => return None,
            },
            Action::Deliver(i) => {
                let m = s.net.remove(i);
                let c = msg_client(&m);
                match m {
                    Msg::Created { seq, ahead, .. } => {
                        s.clients[c].entry = Some(seq);
                        self.placed(&mut s, c, &ahead);
                    }
                    Msg::Armed { .. } => {}
                    Msg::Moved { ahead, .. } | Msg::Ahead { ahead, .. } => self.placed(&mut s, c, &ahead),
                    Msg::Deleted { .. } if self.hold_when_woken => {
                        s.clients[c].phase = Phase::Holding;
                        s.waited_grant = true;
                    }
                    // `deleted` said nothing of the place: `look`.
                    Msg::Deleted { .. } => {
                        let own = s.clients[c].entry?;
                        s.clients[c].phase = Phase::Looking;
                        let ahead = Self::ahead(&s, own);
                        Self::send(&mut s, Msg::Ahead { client: c, ahead });
                    }
                }
            }
            Action::LoseNotification(i) => {
                s.faults -= 1;
                s.net.remove(i);
            }
            Action::GiveUp(c) => {
                // The wait's deadline: `leave`.
                s.faults -= 1;
                Self::finish(&mut s, c);
            }
            Action::Expire(c) => {
                // The session's entries go; its client was told lost (its hold or wait ends).
                s.faults -= 1;
                s.net.retain(|m| msg_client(m) != c);
                let own: Vec<u8> = s.queue.iter().filter(|e| e.client == c).map(|e| e.seq).collect();
                for seq in own {
                    Self::delete(&mut s, seq);
                }
                Self::finish(&mut s, c);
            }
        }
        let holders: Vec<(usize, Op)> =
            (0..s.clients.len()).filter_map(|c| self.holder(&s, c).map(|op| (c, op))).collect();
        if holders.len() > 1 && holders.iter().any(|h| h.1 == Op::Write) {
            s.broken = Some(format!("clients {holders:?} hold at once"));
        }
        let done = s.clients.iter().enumerate().all(|(c, cl)| cl.op >= self.programs[c].len());
        if done && s.net.is_empty() && !s.queue.is_empty() {
            s.broken = Some(format!("every client is done, and entries are left: {:?}", s.queue));
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("nothing went wrong", |_, s: &State| s.broken.is_none()),
            Property::sometimes("a grant after a wait", |_, s: &State| s.waited_grant),
            Property::sometimes("every client is done", |m: &Recipe, s: &State| {
                s.clients.iter().enumerate().all(|(c, cl)| cl.op >= m.programs[c].len())
            }),
        ]
    }
}

fn msg_client(m: &Msg) -> usize {
    match m {
        Msg::Created { client, .. }
        | Msg::Armed { client }
        | Msg::Moved { client, .. }
        | Msg::Ahead { client, .. }
        | Msg::Deleted { client } => *client,
    }
}

fn check(model: Recipe, until: HasDiscoveries) -> impl Checker<Recipe> {
    crate::model_kit::check("queue model", model, until)
}

use Op::{Read as R, Write as W};

/// CI: three clients (59,004 states, 0.5 s). `DLOCK_MODEL_LONG=1`: a fourth, a reader (4.2
/// million states, about a minute).
#[test]
fn writers_and_readers_with_expiry_and_lost_watches() {
    let mut programs = vec![vec![W, R], vec![W], vec![R, W]];
    if std::env::var_os("DLOCK_MODEL_LONG").is_some() {
        programs.push(vec![R]);
    }
    let c = check(Recipe { programs, faults: 2, hold_when_woken: false }, HasDiscoveries::All);
    if let Some(p) = c.discovery("nothing went wrong") {
        panic!("{:#?}", p.into_actions());
    }
    for p in ["a grant after a wait", "every client is done"] {
        assert!(c.discovery(p).is_some(), "never reached: {p}");
    }
}

/// The recipe looks again after its predecessor goes (`deleted` answers `None`, then `look`):
/// the predecessor may have been a waiter that left, with the holder still ahead. Holding at
/// once instead, the checker finds two holders.
#[test]
fn holding_when_woken_finds_two_holders() {
    let model = Recipe { programs: vec![vec![W], vec![W], vec![W]], faults: 1, hold_when_woken: true };
    let c = check(model, HasDiscoveries::AnyFailures);
    let path = c.discovery("nothing went wrong").expect("a counterexample");
    let steps: Vec<String> = path.into_actions().iter().map(|a| format!("{a:?}")).collect();
    println!("hold when woken: {}", steps.join(" -> "));
}

/// The model is the code: the steps the recipe takes through its store are the ones this model
/// takes. A store call added to `QueueStore`, or to `first`'s loop, fails here until the model
/// takes it (or says why not).
#[test]
fn the_model_takes_the_recipes_steps() {
    const MODELLED: [&str; 6] = ["enqueue", "watch", "deleted", "look", "leave", "hold"];
    // The hold table's: nesting answers from the client's own table, with no request.
    const NOT_MODELLED: [&str; 2] = ["holds", "delete_lost"];
    let src = include_str!("recipe.rs");
    let trait_body =
        src.split("pub trait QueueStore").nth(1).and_then(|t| t.split("\n}\n").next()).expect("the trait");
    let methods: Vec<&str> = trait_body
        .lines()
        .filter_map(|l| l.trim().strip_prefix("async fn ").or_else(|| l.trim().strip_prefix("fn ")))
        .filter_map(|l| l.split('(').next())
        .collect();
    assert!(methods.len() >= 6, "the trait's methods were not found: {methods:?}");
    for m in &methods {
        assert!(MODELLED.contains(m) || NOT_MODELLED.contains(m), "QueueStore::{m} is not in the model");
    }
    let first = src.split("pub async fn first<").nth(1).expect("first()");
    let first = first.split("\n}\n").next().expect("its body");
    let mut called: Vec<&str> = first.split("store.").skip(1).filter_map(|c| c.split('(').next()).collect();
    called.sort_unstable();
    called.dedup();
    assert_eq!(called, ["deleted", "enqueue", "leave", "look", "watch"], "first() takes other steps now");
}
