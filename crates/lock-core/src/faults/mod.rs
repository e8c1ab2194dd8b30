//! Faults on demand around any backend, for testing code that uses locks: calls that fail,
//! stall or answer late, answers lost after the store applied the request, and holds the store
//! forgets, so that a test can check what the code does with a `lost()` signal, a timeout or a
//! temporary error without writing a forwarding [`LockBackend`] of its own.
//!
//! [`FaultyBackend::wrap`] puts a backend behind the wrapper and hands back a [`Faults`]
//! handle. Until a fault is armed the wrapper changes nothing: every method of the trait
//! (capabilities, subscriptions, notes, records, listing, eviction) is forwarded as it is.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), lock_core::LockError> {
//! use std::{sync::Arc, time::Duration};
//! use lock_core::faults::{FaultyBackend, Op};
//! use lock_core::{Locker, MemoryBackend};
//!
//! let (backend, faults) = FaultyBackend::wrap(Arc::new(MemoryBackend::new()));
//! let locker = Locker::new(Arc::new(backend));
//!
//! // The store is unreachable for one attempt: the caller sees a temporary error.
//! faults.fail_next(Op::TryAcquire, 1);
//! let refused = locker.try_lock("job").await.expect_err("injected");
//! assert!(refused.is_temporary());
//!
//! // The store forgets a hold: the holder's next renewal is refused and `lost()` fires.
//! let guard = locker.lock("job").wait(Duration::from_secs(1)).acquire().await?;
//! assert_eq!(faults.lose("job").await?, 1);
//! guard.lost().await;
//! # Ok(()) }
//! ```
//!
//! Faults apply to the calls that start while they are armed, and last until [`Faults::heal`]
//! (the counted ones until used up). Waits (latency and stalls) run on tokio's clock, so under
//! paused time they cost no real time; a stalled call whose future is dropped (a caller's
//! timeout) never reaches the store.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::backend::{Epoch, LockBackend, Mutex};
use crate::{LockError, OwnerToken};
use hooks::Hooks;

mod forward;
mod holds;
mod hooks;
mod plan;
#[cfg(all(test, feature = "memory"))]
mod tests;

/// A backend call that faults can be armed on: the [`LockBackend`] method of the same name.
/// (`name`, `capabilities`, `identity` and `listening` answer locally and never fail.)
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
#[allow(missing_docs)] // the `LockBackend` methods of the same names
pub enum Op {
    TryAcquire,
    Release,
    Renew,
    Inspect,
    LeaveQueue,
    Subscribe,
    SetNote,
    Note,
    RaiseFence,
    List,
    Evict,
    Record,
}

impl Op {
    /// Every call, for arming one fault on all of them (a slice: calls may be added).
    pub const ALL: &'static [Op] = &[
        Op::TryAcquire,
        Op::Release,
        Op::Renew,
        Op::Inspect,
        Op::LeaveQueue,
        Op::Subscribe,
        Op::SetNote,
        Op::Note,
        Op::RaiseFence,
        Op::List,
        Op::Evict,
        Op::Record,
    ];

    /// The method's name, as in errors.
    pub fn name(self) -> &'static str {
        match self {
            Op::TryAcquire => "try_acquire",
            Op::Release => "release",
            Op::Renew => "renew",
            Op::Inspect => "inspect",
            Op::LeaveQueue => "leave_queue",
            Op::Subscribe => "subscribe",
            Op::SetNote => "set_note",
            Op::Note => "note",
            Op::RaiseFence => "raise_fence",
            Op::List => "list",
            Op::Evict => "evict",
            Op::Record => "record",
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Clone, Copy, Debug)]
enum Stall {
    For(Duration),
    Forever,
}

/// The error of [`Faults::fail_with`].
#[derive(Clone)]
struct MakeError(Arc<dyn Fn() -> LockError + Send + Sync>);

impl fmt::Debug for MakeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("MakeError")
    }
}

#[derive(Clone, Debug, Default)]
struct Armed {
    fail_next: u64,
    fail_all: bool,
    fail_with: Option<MakeError>,
    lose_answers: u64,
    stall: Option<Stall>,
}

/// How a call fails.
enum Failure {
    /// A temporary error: the connection was refused.
    Refused,
    /// The error the test asked for.
    With(MakeError),
}

#[derive(Debug, Default)]
struct State {
    armed: [Armed; Op::ALL.len()],
    calls: [u64; Op::ALL.len()],
    latency: Duration,
    /// Holds granted through the wrapper and not known to be gone: key → owner → grants.
    holds: HashMap<String, HashMap<OwnerToken, u32>>,
    /// Holds the store forgot ([`Faults::lose`]): until their owner releases them or is granted
    /// the key again, they answer "not held" as a store that lost them would.
    lost: HashSet<(String, OwnerToken)>,
    hooks: Hooks,
}

#[derive(Debug)]
struct Shared {
    state: Mutex<State>,
    /// Bumped by `heal`, which ends every wait in progress (in the order they began: see
    /// `Epoch`).
    healed: Epoch,
    /// Bumped by every grant, for [`Faults::until_held`].
    granted: watch::Sender<u64>,
}

/// A backend behind faults armed through its [`Faults`] handle (see [the module](self)).
/// Name, capabilities and identity are the wrapped backend's.
pub struct FaultyBackend {
    inner: Arc<dyn LockBackend>,
    faults: Faults,
}

impl FaultyBackend {
    /// `inner` behind the wrapper, with no fault armed, and the handle that arms them.
    pub fn wrap(inner: Arc<dyn LockBackend>) -> (FaultyBackend, Faults) {
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            healed: Epoch::new(),
            granted: watch::Sender::new(0),
        });
        let faults = Faults { shared, inner: inner.clone() };
        (FaultyBackend { inner, faults: faults.clone() }, faults)
    }

    /// Another handle on this wrapper's faults.
    pub fn faults(&self) -> Faults {
        self.faults.clone()
    }

    /// The wrapped backend.
    pub fn inner(&self) -> &Arc<dyn LockBackend> {
        &self.inner
    }
}

impl fmt::Debug for FaultyBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultyBackend").field("inner", &self.inner).finish_non_exhaustive()
    }
}

/// Arms and clears the faults of one [`FaultyBackend`]; clones share them.
#[derive(Clone)]
pub struct Faults {
    shared: Arc<Shared>,
    inner: Arc<dyn LockBackend>,
}

impl fmt::Debug for Faults {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.shared.state.lock();
        f.debug_struct("Faults")
            .field("armed", &s.armed)
            .field("latency", &s.latency)
            .field("lost", &s.lost.len())
            .finish_non_exhaustive()
    }
}

impl Faults {
    fn arm(&self, op: Op, f: impl FnOnce(&mut Armed)) {
        f(&mut self.shared.state.lock().armed[op as usize]);
    }

    /// The next `n` calls of `op` fail without reaching the store, with a temporary
    /// [`LockError::Backend`] (a refused connection), as a store that is briefly unreachable.
    pub fn fail_next(&self, op: Op, n: u64) {
        self.arm(op, |a| a.fail_next = a.fail_next.saturating_add(n));
    }

    /// Every call of `op` fails as with [`fail_next`](Self::fail_next), until [`heal`](Self::heal).
    pub fn fail_all(&self, op: Op) {
        self.arm(op, |a| a.fail_all = true);
    }

    /// Every call of `op` fails with the error `make` returns, without reaching the store, until
    /// [`heal`](Self::heal): what a store answers that the code must not retry, such as
    /// [`LockError::permission_denied`] after a password rotation or
    /// [`LockError::permanent`]. It takes precedence over the other failures of `op`.
    pub fn fail_with(&self, op: Op, make: impl Fn() -> LockError + Send + Sync + 'static) {
        let make = MakeError(Arc::new(make));
        self.arm(op, |a| a.fail_with = Some(make));
    }

    /// Every call fails until [`heal`](Self::heal): the store is down. Holds run out on the
    /// watchdog's failed renewals (the holder's state turns uncertain, then lost at its lease's
    /// local deadline), as they would with a real outage.
    pub fn outage(&self) {
        let mut s = self.shared.state.lock();
        for a in &mut s.armed {
            a.fail_all = true;
        }
    }

    /// The next `n` calls of `op` reach the store and are applied, and their answers are lost:
    /// the caller gets a temporary error (a reset connection). A lost grant stays held in the
    /// store until its lease runs out (a session-bound store's, until the session ends), as it
    /// would after a real lost answer; a lost renewal extended the lease all the same.
    pub fn lose_answers(&self, op: Op, n: u64) {
        self.arm(op, |a| a.lose_answers = a.lose_answers.saturating_add(n));
    }

    /// Every call of `op` waits `d` before it is sent to the store, until [`heal`](Self::heal)
    /// (which also ends the waits in progress): a store or a link that answers slowly.
    pub fn stall(&self, op: Op, d: Duration) {
        self.arm(op, |a| a.stall = Some(Stall::For(d)));
    }

    /// Every call of `op` hangs until [`heal`](Self::heal), then goes to the store: a partition
    /// that drops packets without resetting the connection. Only the caller's own timeout
    /// (dropping the call's future) ends it earlier, and then the request never reached the
    /// store.
    pub fn stall_forever(&self, op: Op) {
        self.arm(op, |a| a.stall = Some(Stall::Forever));
    }

    /// Every call waits `d` before it is sent to the store (a slow link), until
    /// [`heal`](Self::heal) or another `latency`. A stall of the call comes on top.
    pub fn latency(&self, d: Duration) {
        self.shared.state.lock().latency = d;
    }

    /// Clears every armed fault and the latency, and lets every stalled call go on to the
    /// store. Holds already forgotten ([`lose`](Self::lose)) stay forgotten.
    pub fn heal(&self) {
        let mut s = self.shared.state.lock();
        s.armed = Default::default();
        s.latency = Duration::ZERO;
        // Under the state lock, so that a call that planned before it sees the change.
        self.shared.healed.bump();
    }

    /// How many calls of `op` the wrapper was given (failed ones included).
    pub fn calls(&self, op: Op) -> u64 {
        self.shared.state.lock().calls[op as usize]
    }
}
