//! Multi-master quorum locking (Redlock) as a combinator over any independent backends.
//!
//! [`QuorumBackend`] holds a lock when a majority of its members granted it to the same owner
//! token within the lease (minus a clock-drift allowance). Members are independent stores (for
//! Redlock: separate Redis masters without replication); any [`LockBackend`] works.
//!
//! # Fencing tokens
//! Each member draws its own counter, so the largest counter of one majority can be below the
//! largest of an earlier majority (the member that drew the earlier maximum may be missing from
//! the later one): taken alone, member counters cannot fence off a stale holder. That is
//! Kleppmann's critique of Redlock ("How to do distributed locking", 2016). This quorum adds the
//! second round that fixes it, when every member has [`Capability::fencing`] and
//! [`LockBackend::fences`]:
//! 1. the token of a grant is the largest fence among the members that granted it;
//! 2. before answering, the quorum writes that token back with [`RaiseFence::raise_fence`]
//!    to the members that granted with a smaller one (concurrently, within the member timeout;
//!    a member that drew the token itself already has its counter there);
//! 3. the grant is returned only when a majority holds a counter at or above the token (the
//!    write-back confirmed, or drawn there), within the validity time; otherwise every member
//!    is released again and the answer is a temporary error.
//!
//! Any two majorities share a member, and a member only raises its counter for an owner that
//! still holds the key there, so the next grant anywhere draws, on that shared member, a fence
//! above the previous token: tokens are strictly increasing per key across all grants, and
//! [`Capability::fencing`] is `true`. The write-back costs one more round trip per grant (to
//! all granting members at once), none on a refusal.
//!
//! The caveat is Redlock's own, for fencing as for exclusion: a member restarted without
//! persistence forgets its counter. A Redis member then restarts it from its clock in
//! microseconds (`lock-redis`'s `fence.lua`), which stays above earlier tokens as long as the
//! members' clocks agree far better than the time the counters have been running; a member
//! whose counter restarts lower could, together with other such members, form a majority that
//! repeats a token. Persistence (`appendfsync always`) or delayed restarts (a restarted member
//! stays out for the longest lease) avoid both.
//!
//! Without fencing members (or without `raise_fence`), [`Capability::fencing`] is `false` and
//! the [`Grant`] carries a number that is unique per acquisition, ordered by the largest member
//! counter: `max * n + i`, where `i` is the index of the (first) member that drew the maximum,
//! unique because one member never draws the same counter twice. Use it for logs and
//! correlation, never for fencing.
//!
//! [`Capability::fencing`]: crate::backend::Capability::fencing
//! [`LockBackend::fences`]: crate::backend::LockBackend::fences
//! [`Grant`]: crate::backend::Grant

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use futures_util::future::join_all;
use tokio::time::timeout;

use crate::backend::LockBackend;
use crate::{FencingToken, LockError, OwnerToken, Result};

use failure::{Failure, NoQuorum, member_result};

mod attempt;
mod evict;
mod failure;
mod listen;
mod lock_backend;

const NAME: &str = "quorum";

/// Shortest default per-member timeout of an acquisition attempt.
pub const MEMBER_TIMEOUT_MIN: Duration = Duration::from_millis(5);
/// Longest default per-member timeout, also the default bound of a member's release and
/// subscribe.
pub const MEMBER_TIMEOUT_MAX: Duration = Duration::from_millis(500);
/// Fixed part of the clock-drift allowance (Redlock: 2 ms for the expiry precision of Redis).
pub const DRIFT_FLOOR: Duration = Duration::from_millis(2);

/// Redlock's clock-drift allowance for `lease`: 1 % of it plus [`DRIFT_FLOOR`].
pub fn drift_allowance(lease: Duration) -> Duration {
    lease / 100 + DRIFT_FLOOR
}

/// Default per-member timeout of one attempt: a twentieth of the lease, within
/// [`MEMBER_TIMEOUT_MIN`]..=[`MEMBER_TIMEOUT_MAX`], so a dead member costs little of the lease.
pub fn default_member_timeout(lease: Duration) -> Duration {
    (lease / 20).clamp(MEMBER_TIMEOUT_MIN, MEMBER_TIMEOUT_MAX)
}

type Members = Arc<[Arc<dyn LockBackend>]>;

/// A lock held on a majority of independent members (the Redlock algorithm), usable as one
/// [`LockBackend`].
///
/// # Behavior
/// - `try_acquire` asks one member first (the probe: member 0, moving on to the next when it
///   fails), then every other member at once; each request goes with the same owner token and
///   lease, once (never waiting in a member's queue), bounded by a per-member timeout
///   ([`default_member_timeout`], or [`with_member_timeout`](Self::with_member_timeout)). A
///   refusal by the probe answers `Held` at once: contenders meet at the probe, so they rarely
///   split the other members' votes, and a refused waiter costs one request instead of `n`.
///   The price: a stale hold on the probe member alone (a crashed client's
///   half-done attempt, an undo that failed there) refuses everyone until it expires. The
///   attempt succeeds when at least `n/2 + 1` members granted and the time spent is below the
///   lease minus [`drift_allowance`]; the granted lease is the smallest member lease minus that
///   allowance, counted from the start of the call. Otherwise every member that granted, or
///   whose outcome is unknown, is released again (awaited before the answer, so a retry by the
///   same owner cannot race it), and the answer is `Held` with the smallest remaining-lease
///   hint (after a split vote: a random delay of about one attempt), or a temporary error when
///   too few members answered to ever reach a quorum (permanent when permanent member errors
///   alone rule it out).
/// - `release` and `renew` go to every member; a key counts as released or renewed when a
///   quorum confirmed it. When failed members leave the outcome open, the answer is a
///   temporary error (unknown, not lost).
/// - `inspect` shows the owner that holds on a quorum of the members that answer, and, where
///   tokens are fences, the largest fence its holds show (the grant's token). `evict` by that
///   fence takes the owner's hold from every member that shows one no larger, each by its own
///   fence, and counts as done when fewer than a quorum may still hold it (its renewal is then
///   refused); see `evict.rs`.
/// - `subscribe` joins the key's one listener in this process, which listens on `n - q + 1`
///   members (from the probe on, replacing members that cannot subscribe by the next ones): a
///   release of the lock reaches at least a quorum, so one of them publishes it. Each
///   notification it hears wakes one waiter, not every waiter of the key. Fewer subscriptions
///   than all `n` also means fewer pub/sub messages per release. A missed notification costs at
///   most the retry hint.
///
/// Members renew with the lease plus [`drift_allowance`], so the core's local deadline (lease
/// from the request) stays inside every member's expiry despite clock drift.
///
/// Not reentrant (reentrant members would nest). A failed attempt is undone by owner only on the
/// members that answered a grant; a member whose answer never came undoes its own attempt by
/// that attempt's nonce, so a nested attempt of the holder's owner, cut off, never frees the
/// outer hold.
/// Fencing tokens when every member can raise its counter: see the module docs (a grant then
/// takes one more round trip, the write-back of its token).
///
/// A member attempt cut off by its timeout is undone by the member's own cancellation cleanup
/// in the background as well; should the same attempt's retry reach that member before the
/// cleanup, the cleanup removes that one member's vote (the lock then rests on the others, and
/// the watchdog's next renewal reports a loss if they are no longer a quorum).
#[derive(Clone)]
pub struct QuorumBackend {
    members: Members,
    quorum: usize,
    member_timeout: Option<Duration>,
    /// The member asked first (moves on when it fails).
    probe: Arc<AtomicUsize>,
    /// Waiters, and one listener per key they wait on.
    listen: Arc<listen::Listen>,
}

impl fmt::Debug for QuorumBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QuorumBackend")
            .field("members", &self.members)
            .field("quorum", &self.quorum)
            .field("member_timeout", &self.member_timeout)
            .finish()
    }
}

impl QuorumBackend {
    /// A quorum over `members` (use an odd number: 3 or 5).
    ///
    /// # Errors
    /// [`LockError::InvalidConfig`] when `members` is empty.
    pub fn new(members: Vec<Arc<dyn LockBackend>>) -> Result<Self> {
        if members.is_empty() {
            return Err(LockError::InvalidConfig { reason: "a quorum needs at least one member".to_owned() });
        }
        let quorum = members.len() / 2 + 1;
        Ok(QuorumBackend {
            members: members.into(),
            quorum,
            member_timeout: None,
            probe: Arc::default(),
            listen: Arc::default(),
        })
    }

    /// A fixed per-member timeout for every operation, instead of [`default_member_timeout`]
    /// (attempts) and [`MEMBER_TIMEOUT_MAX`] (release, subscribe).
    pub fn with_member_timeout(mut self, timeout: Duration) -> Self {
        self.member_timeout = Some(timeout);
        self
    }

    /// The members.
    pub fn members(&self) -> &[Arc<dyn LockBackend>] {
        &self.members
    }

    /// How many members must agree: `n/2 + 1`.
    pub fn quorum(&self) -> usize {
        self.quorum
    }

    /// Grants carry fencing tokens: every member draws them and can raise its counter (module
    /// docs).
    fn fencing(&self) -> bool {
        self.members.iter().all(|m| m.capabilities().fencing && m.fences().is_some())
    }

    /// Step 2 of the module docs: raise the counters of the members in `grants` that drew less
    /// than `token` to it, at once, each within `t`. Returns how many granting members now
    /// have a counter at or above the token (those that drew it, and confirmed raises), and the
    /// failures.
    async fn write_back(
        &self,
        key: &str,
        owner: OwnerToken,
        grants: &[(usize, u64)],
        token: u64,
        t: Duration,
    ) -> (usize, Vec<Failure>) {
        let drawn = grants.iter().filter(|(_, f)| *f >= token).count();
        let calls = grants.iter().filter(|(_, f)| *f < token).map(|(i, _)| {
            let m = &self.members[*i];
            async move { member_result(timeout(t, m.raise_fence(key, owner, FencingToken(token))).await, t) }
        });
        let (mut confirmed, mut failures) = (drawn, Vec::new());
        for r in join_all(calls).await {
            match r {
                Ok(true) => confirmed += 1,
                // The member no longer holds the key for this owner (its hold ended): no vote.
                Ok(false) => {}
                Err(f) => failures.push(f),
            }
        }
        (confirmed, failures)
    }

    fn attempt_timeout(&self, lease: Duration) -> Duration {
        self.member_timeout.unwrap_or_else(|| default_member_timeout(lease))
    }

    fn other_timeout(&self) -> Duration {
        self.member_timeout.unwrap_or(MEMBER_TIMEOUT_MAX)
    }

    /// The error for "fewer than a quorum answered": permanent when permanent failures alone
    /// rule a quorum out (retrying cannot help), temporary otherwise.
    fn no_quorum(&self, what: &str, answered: usize, failures: Vec<Failure>) -> LockError {
        let permanent =
            failures.iter().filter(|f| matches!(f, Failure::Error(e) if !e.is_temporary())).count();
        let err = NoQuorum { what: what.to_owned(), answered, n: self.members.len(), failures };
        if self.members.len() - permanent < self.quorum {
            LockError::permanent(NAME, err)
        } else {
            LockError::temporary(NAME, err)
        }
    }
}
