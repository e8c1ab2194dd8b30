//! The Redis lock protocol as a stateright model: clients whose steps are the backend's (one
//! attempt, its clean-up, the hand-over taken without a round trip through
//! [`handoffs::Entry`], a release, the end of a wait), a network that delays and reorders
//! everything, loses answers and delivers a request twice (a driver's resend), and a server
//! that runs the shipped scripts ([`super::lua`]) on a model keyspace whose keys expire on a
//! clock the model moves.

use std::sync::LazyLock;
use std::time::Duration;

use stateright::{Model, Property};

mod checks;
mod client;
mod config;
mod server;
use tokio::time::Instant;

use super::keyspace::{Keyspace, Reply};
use super::lua;
use crate::call::Lua as Script;
use crate::handoffs::{self, Before, Entry};
use crate::keys::{KeyLayout, KeyNames};
use crate::options::Mode;
use crate::scripts;

/// Server milliseconds.
type Ms = u64;

/// The server clock at the start (a real one is never near zero: the fence counter starts at
/// it).
const START: Ms = 1_000_000;
const LEASE: Ms = 1000;
/// The claim window of a hand-over (`RedisLock::claim_window`).
const CLAIM: Ms = 200;
/// The waiter timeout a waiting attempt sends (`RedisLock::wait_ms`).
const WAIT: Ms = 600;
/// Time moves in steps this long, up to `HORIZON` after the start: within the claim window,
/// so that a hold lapses only where a script cuts it (no watchdog renews here: the lease
/// model, `lock_core::renewer::model`, checks that).
const STEP: Ms = 100;
const HORIZON: Ms = 100;
/// Attempts of one acquisition, at most, before its wait ends (by default).
const ATTEMPTS: u8 = 2;
const KEY: &str = "k";

/// The instants the client's code sees, one per model millisecond from a fixed base.
static BASE: LazyLock<Instant> = LazyLock::new(Instant::now);

fn instant(ms: Ms) -> Instant {
    *BASE + Duration::from_millis(ms - START)
}

/// What a client does, in order: acquire (a nesting while it holds), release its last hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Op {
    Acquire,
    Release,
    /// The read side of the read-write lock (`acquire_shared`, no permits), and its release.
    Read,
    ReadRelease,
    /// A semaphore's permit (`acquire_shared` with permits, a hand-over taken through the
    /// `Entry`), and its release.
    Permit,
    PermitRelease,
    /// The write side asked by the holder of a read (`UpgradeableReadGuard::upgrade`: an
    /// acquisition under its own owner that names the read); released by `Release`, the read
    /// by `ReadRelease`.
    Upgrade,
}

/// A request as sent; its arguments are built when the server runs it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Call {
    /// One waiting attempt (`acquire_simple` / `acquire_hash`); an upgrade names the owner of
    /// the client's read (`Side::Upgrade`).
    Acquire { nonce: u8, upgrade: Option<u8>, taken: Option<u64> },
    /// `release_simple` or the hash release, with its own nonce.
    Release { nonce: u8 },
    /// `script_calls::cancel`: an attempt's undo (a nonce, armed by `arm_simple` / `arm_hash`)
    /// or the end of a wait (`leave_queue`).
    Cancel { nonce: Option<u8>, taken: Option<u64> },
    /// `acquire_shared` for a read (idempotent per owner: a read has no nonce).
    Read,
    /// `release_shared`: a read's or a permit's release, and the undo of a shared attempt
    /// given up (`arm_shared`).
    ReadRelease,
    /// `acquire_shared` with the configuration's permits (idempotent per owner, as a read).
    Permit,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Msg {
    /// `seq` 0: nobody waits for the answer (a clean-up). A `ghost` is a copy whose answer
    /// nobody hears: the first send of a request the driver sent again on a new connection.
    Request {
        client: usize,
        owner: u8,
        seq: u8,
        call: Call,
        ghost: bool,
    },
    Answer {
        client: usize,
        seq: u8,
        reply: Reply,
    },
    /// A hand-over published to the client's inbox.
    Handed {
        client: usize,
        payload: String,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Waiting {
    Acquire,
    Release,
    Read,
    ReadRelease,
    Permit,
    PermitRelease,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Client {
    pc: usize,
    /// Holds it believes it has (nested ones counted), their fence and until when they last.
    holds: u8,
    /// Holds a read (its lease in `until`), under the owner `reader`.
    reads: bool,
    reader: u8,
    /// Holds a permit: its slot (its fence in `fence`, its lease in `until`).
    slot: Option<u64>,
    fence: u64,
    until: Ms,
    /// The acquisition whose owner token it uses (a new one per outermost acquisition).
    owner: u8,
    attempts: u8,
    /// Registered in the wait set by a refused attempt of this acquisition.
    registered: bool,
    nonces: u8,
    pending: Option<(u8, Waiting, Ms)>,
    /// How many copies of the pending request ran.
    runs: u8,
    /// The owner of an acquisition of which a copy of an attempt, whose answer nobody hears
    /// (the first send of a resent request), was granted.
    unheard: Option<u8>,
    entry: Entry,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct State {
    ks: Keyspace,
    clients: Vec<Client>,
    net: Vec<Msg>,
    /// Faults left: a request delivered twice, an attempt given up before its answer came.
    faults: u8,
    /// The highest fence a hold was granted with (of each permit's slot: permits are held
    /// together, each slot by one holder at a time), and what went wrong so far.
    top_fence: u64,
    slot_fences: [u64; 4],
    broken: Option<String>,
    /// Hand-overs taken without a round trip (a `sometimes` property).
    taken: u8,
    /// Every client is done and the lock is held for the known delay (see `orphaned`).
    orphaned: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Action {
    Tick,
    /// A client's next step: an attempt (or taking a hand-over), a release, the end of a wait.
    Step(usize),
    /// A client gives its pending request up (a time-out or a cut): the request may still run.
    GiveUp(usize),
    Deliver(usize),
    Duplicate(usize),
}

/// The scripts one model runs: the shipped ones, or with a fix reverted.
struct Scripts {
    acquire: Script,
    release: Script,
    cancel: Script,
    read: Script,
    read_release: Script,
}

/// One configuration: the mode, each client's operations, the faults, the scripts.
pub(crate) struct Protocol {
    pub(crate) name: &'static str,
    mode: Mode,
    programs: Vec<Vec<Op>>,
    faults: u8,
    scripts: Scripts,
    names: KeyNames,
    layout: KeyLayout,
    horizon: Ms,
    /// An attempt's undo names its waiter (its tag), as before f4b9ec5a.
    undo_names_waiter: bool,
    /// The driver may send a request twice (a fault).
    resends: bool,
    /// Attempts of one acquisition, at most, before its wait ends.
    attempts: u8,
    /// A semaphore's permits (for `Op::Permit`).
    permits: u8,
}

fn hex(n: u128) -> String {
    format!("{n:032x}")
}

fn client_id(c: usize) -> String {
    hex(0xc0 + c as u128)
}

fn owner_token(c: usize, owner: u8) -> String {
    hex(((c as u128 + 1) << 64) | u128::from(owner))
}

fn nonce(c: usize, n: u8) -> String {
    hex(0xa000 + ((c as u128) << 8) + u128::from(n))
}

fn opt(f: Option<u64>) -> String {
    f.map(|f| f.to_string()).unwrap_or_default()
}

impl Protocol {
    fn tag(&self, c: usize) -> String {
        let id = client_id(c);
        let inbox = self.layout.inbox(&id);
        id + &inbox
    }
}

impl Model for Protocol {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let mut ks = Keyspace::new(START);
        for c in 0..self.programs.len() {
            ks.subscribed.insert(self.layout.inbox(&client_id(c)));
        }
        let client = Client {
            pc: 0,
            holds: 0,
            reads: false,
            reader: 0,
            slot: None,
            fence: 0,
            until: 0,
            owner: 0,
            attempts: 0,
            registered: false,
            nonces: 0,
            pending: None,
            runs: 0,
            unheard: None,
            entry: Entry::new(KEY),
        };
        vec![State {
            ks,
            clients: vec![client; self.programs.len()],
            net: Vec::new(),
            faults: self.faults,
            top_fence: 0,
            slot_fences: [0; 4],
            broken: None,
            taken: 0,
            orphaned: false,
        }]
    }

    fn actions(&self, s: &State, out: &mut Vec<Action>) {
        if s.broken.is_some() {
            return;
        }
        if s.ks.now < START + self.horizon {
            out.push(Action::Tick);
        }
        for (c, cl) in s.clients.iter().enumerate() {
            match cl.pending {
                // Given up before its answer: cut before it ran, or its answer lost (the
                // answer then arrives for nobody). Releases are not given up: a resent one is.
                Some((_, Waiting::Acquire | Waiting::Permit, _)) if s.faults > 0 => {
                    out.push(Action::GiveUp(c))
                }
                Some(_) => {}
                None if cl.pc < self.programs[c].len() => out.push(Action::Step(c)),
                None => {}
            }
        }
        for (i, m) in s.net.iter().enumerate() {
            out.push(Action::Deliver(i));
            if self.resends && s.faults > 0 && matches!(m, Msg::Request { seq, ghost: false, .. } if *seq > 0)
            {
                out.push(Action::Duplicate(i));
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = last.clone();
        match action {
            Action::Tick => {
                s.ks.now += STEP;
                s.ks.expire();
            }
            Action::Step(c) => self.step(&mut s, c),
            Action::GiveUp(c) => {
                s.faults -= 1;
                let cl = &mut s.clients[c];
                let (_, waiting, _) = cl.pending.take()?;
                cl.runs = 0;
                let (owner, nonce) = (cl.owner, cl.nonces);
                if waiting == Waiting::Permit {
                    // `arm_shared`: the undo releases the owner's shared hold and marks it
                    // done; the acquisition goes on under a fresh owner (`Attempts::rotate`),
                    // and the old owner's place in the wait set goes (`leave_queue`).
                    let taken = cl.entry.taken();
                    (cl.owner, cl.entry, cl.registered) = (owner + 1, Entry::new(KEY), false);
                    let undo =
                        Msg::Request { client: c, owner, seq: 0, call: Call::ReadRelease, ghost: false };
                    let call = Call::Cancel { nonce: None, taken };
                    Self::send(&mut s, undo);
                    Self::send(&mut s, Msg::Request { client: c, owner, seq: 0, call, ghost: false });
                } else {
                    // `arm_simple` / `arm_hash`: the attempt's undo, by its nonce; the
                    // acquisition goes on (its next attempt, or the end of its wait).
                    let call = Call::Cancel { nonce: Some(nonce), taken: None };
                    Self::send(&mut s, Msg::Request { client: c, owner, seq: 0, call, ghost: false });
                }
            }
            Action::Deliver(i) => {
                let m = s.net.remove(i);
                self.deliver(&mut s, m);
            }
            Action::Duplicate(i) => {
                // The driver sends the request again on a new connection: that copy's answer
                // is the one the client hears; the first may still run, before or after it.
                s.faults -= 1;
                let live = s.net[i].clone();
                if let Msg::Request { ghost, .. } = &mut s.net[i] {
                    *ghost = true;
                }
                Self::send(&mut s, live);
            }
        }
        // Two holders at once, each within its lease, a writer among them.
        let believers: Vec<usize> = (0..s.clients.len()).filter(|c| self.believes(&s, *c)).collect();
        if believers.len() > 1 && believers.iter().any(|c| s.clients[*c].holds > 0) {
            Self::broke(&mut s.broken, format!("clients {believers:?} both hold the lock"));
        }
        let mut slots: Vec<u64> = believers.iter().filter_map(|c| s.clients[*c].slot).collect();
        slots.sort();
        slots.dedup();
        let permits = believers.iter().filter(|c| s.clients[**c].slot.is_some()).count();
        if permits > usize::from(self.permits) || slots.len() < permits {
            Self::broke(
                &mut s.broken,
                format!("clients {believers:?} hold {permits} permits, slots {slots:?}"),
            );
        }
        if self.settled(&s) && self.held(&s) {
            if self.orphaned(&s) {
                s.orphaned = true;
            } else {
                Self::broke(&mut s.broken, "every client released, and the lock is still held".into());
            }
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("nothing went wrong", |_, s: &State| s.broken.is_none()),
            Property::sometimes("a hand-over is taken without a round trip", |_, s: &State| s.taken > 0),
            Property::sometimes("every client is done", |m: &Protocol, s: &State| m.settled(s)),
            Property::sometimes("a resent attempt orphans a hold", |_, s: &State| s.orphaned),
            Property::sometimes("a reader holds the write too", |_, s: &State| {
                s.clients.iter().any(|c| c.reads && c.holds > 0)
            }),
        ]
    }
}
