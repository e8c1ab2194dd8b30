//! The contracts table: every promise the library makes, every public operation, and for each
//! operation and each promise that applies to it, the case that checks it, or the gap, named
//! as one.
//!
//! A promise is checked per operation, not per feature: a new operation (a public `async fn`
//! of the user API, a `LockBackend` operator call, a store's own call, a CLI verb) is added to
//! [`OPERATIONS`] with its kinds, and the table's own test (`tests/contracts.rs`) fails until
//! every promise that applies to it has a row in [`ROWS`]. The same test fails when the code
//! gains an operation the table lacks, and when a row names a case that does not exist or
//! that nothing runs. Gaps are rows too, so that what is not yet checked is written down and
//! printed by every CI run, never silently absent.

use std::fmt;

mod rows;

pub use rows::ROWS;

/// A promise the library makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Promise {
    /// At most one holder (or the stated number of permits, or readers without a writer) at
    /// once, as a fenced register judges it.
    Exclusion,
    /// Every grant of a key has a fence above every fence handed out before for that key,
    /// across every fence source (removals, restarts, failovers, evictions).
    FencesIncrease,
    /// A hold that overlaps a successor was told lost before the successor's grant plus the
    /// drift margin; the signal reaches every guard of the hold.
    LostBeforeSuccessor,
    /// The call answers by its deadline (or, without one, its response bound) plus a stated
    /// bound, whatever the store does: paused, blackholed, cut, pool exhausted.
    DeadlineBound,
    /// Cancelled, dropped, timed-out and crashed callers leave no key, permit or queue place
    /// wedged: the next caller is served as if they had never come.
    NotWedged,
    /// Never more holders of a semaphore than its (stored) permit count.
    PermitsNeverExceeded,
    /// A grant that waited is live when handed out: a part gathered and lost during the wait
    /// (a fixed lease shorter than the wait, a session ended) is gathered again, never granted.
    GrantedLive,
    /// Read-write locks are phase-fair: a reader queued behind a writer gets in before writers
    /// that queued after it, and writers are never starved.
    PhaseFair,
    /// No call leaves the caller's session or transaction settings changed.
    CallerStateUnchanged,
    /// What a call leaves on the server is bounded per lock, whatever the call rate.
    BookkeepingBounded,
    /// A fenced write whose fence is older than one admitted for its resource is refused and
    /// writes nothing; the same fence is admitted again.
    StaleRefused,
}

impl Promise {
    /// Every promise.
    pub const ALL: [Promise; 11] = [
        Promise::Exclusion,
        Promise::FencesIncrease,
        Promise::LostBeforeSuccessor,
        Promise::DeadlineBound,
        Promise::NotWedged,
        Promise::PermitsNeverExceeded,
        Promise::GrantedLive,
        Promise::PhaseFair,
        Promise::CallerStateUnchanged,
        Promise::BookkeepingBounded,
        Promise::StaleRefused,
    ];

    /// Whether the promise applies to an operation of these kinds.
    pub fn applies(self, kinds: &[Kind]) -> bool {
        let has = |k| kinds.contains(&k);
        match self {
            Promise::Exclusion | Promise::LostBeforeSuccessor => has(Kind::Grants),
            Promise::FencesIncrease => has(Kind::Grants) || has(Kind::TakesAway),
            Promise::DeadlineBound => has(Kind::Store),
            Promise::NotWedged | Promise::BookkeepingBounded => has(Kind::Waits),
            Promise::PermitsNeverExceeded => has(Kind::Permits),
            Promise::GrantedLive => has(Kind::Grants) && has(Kind::Waits),
            Promise::PhaseFair => has(Kind::Shared),
            Promise::CallerStateUnchanged => has(Kind::CallerSession),
            Promise::StaleRefused => has(Kind::Fenced),
        }
    }
}

impl fmt::Display for Promise {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// What an operation does, which decides the promises that apply to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Sends requests to the store.
    Store,
    /// Obtains a hold (a lock, a permit, a read or write side, leadership).
    Grants,
    /// Waits (a deadline, or without a bound): it can be cancelled, time out or be dropped
    /// while queued.
    Waits,
    /// Takes part in a semaphore's count.
    Permits,
    /// One side of a read-write lock.
    Shared,
    /// Runs on a session or transaction the caller owns.
    CallerSession,
    /// Takes a lock away from its holder (an operator's eviction).
    TakesAway,
    /// Writes the user's data under a fence (`dlock::fenced`).
    Fenced,
}

use Kind::{CallerSession, Fenced, Grants, Permits, Shared, Store, TakesAway, Waits};

/// A public operation: `Type::method` of the user API, `LockBackend::method` of the operator
/// calls, or `dlock <verb>`.
#[derive(Clone, Copy, Debug)]
pub struct Operation {
    /// Its name as the table's test finds it in the code.
    pub name: &'static str,
    /// What it does.
    pub kinds: &'static [Kind],
}

const fn op(name: &'static str, kinds: &'static [Kind]) -> Operation {
    Operation { name, kinds }
}

const ACQUIRE: &[Kind] = &[Store, Grants, Waits];
const TRY: &[Kind] = &[Store, Grants];
const CALL: &[Kind] = &[Store];

/// Every public operation. The table's test finds them in the code and fails on one missing.
pub const OPERATIONS: &[Operation] = &[
    op("Locker::try_lock", TRY),
    op("Locker::with_lock", ACQUIRE),
    op("LockRequest::acquire", ACQUIRE),
    op("LockRequest::try_acquire", TRY),
    op("LockRequest::run", ACQUIRE),
    op("LockGuard::release", CALL),
    op("LockGuard::renew", CALL),
    op("MultiLock::acquire", ACQUIRE),
    op("MultiGuard::release", CALL),
    op("ReadRequest::acquire", &[Store, Grants, Waits, Shared]),
    op("ReadRequest::try_acquire", &[Store, Grants, Shared]),
    op("WriteRequest::acquire", &[Store, Grants, Waits, Shared]),
    op("WriteRequest::try_acquire", &[Store, Grants, Shared]),
    op("ReadGuard::release", CALL),
    op("WriteGuard::release", CALL),
    op("UpgradeableRequest::acquire", &[Store, Grants, Waits, Shared]),
    op("UpgradeableRequest::try_acquire", &[Store, Grants, Shared]),
    op("UpgradeableReadGuard::upgrade", &[Store, Grants, Waits, Shared]),
    op("UpgradeableReadGuard::try_upgrade", &[Store, Grants, Shared]),
    op("UpgradeableReadGuard::release", CALL),
    op("Semaphore::try_acquire", &[Store, Grants, Permits]),
    op("Semaphore::available", CALL),
    op("Semaphore::resize", &[Store, Permits]),
    op("Semaphore::stored_permits", CALL),
    op("PermitRequest::acquire", &[Store, Grants, Waits, Permits]),
    op("PermitRequest::try_acquire", &[Store, Grants, Permits]),
    op("PermitRequest::acquire_many", &[Store, Grants, Waits, Permits]),
    op("PermitRequest::try_acquire_many", &[Store, Grants, Permits]),
    op("Permit::release", CALL),
    op("Permits::release", CALL),
    op("CountDownLatch::set_count", CALL),
    op("CountDownLatch::count_down", CALL),
    op("CountDownLatch::count", CALL),
    op("CountDownLatch::wait", &[Store, Waits]),
    op("CountDownLatch::delete", CALL),
    op("LeaderElection::leader", CALL),
    op("Candidate::until_leader", ACQUIRE),
    op("Candidate::resign", CALL),
    op("LockBackend::inspect", CALL),
    op("LockBackend::list", CALL),
    op("LockBackend::evict", &[Store, TakesAway]),
    op("PgLock::lock_in_transaction", &[Store, Grants, Waits, CallerSession]),
    op("PgLock::try_lock_in_transaction", &[Store, Grants, CallerSession]),
    op("Fenced::write", &[Fenced]),
    op("lock_postgres::Fences::admit", &[Store, Fenced, CallerSession]),
    op("lock_mysql::Fences::admit", &[Store, Fenced, CallerSession]),
    op("lock_redis::fenced::set", &[Store, Fenced]),
    op("lock_redis::fenced::delete", &[Store, Fenced]),
    op("dlock run", ACQUIRE),
    op("dlock leader", ACQUIRE),
    op("dlock status", CALL),
    op("dlock list", CALL),
    op("dlock unlock", &[Store, TakesAway]),
    // Setup and local calls: no promise of the table applies.
    op("dlock completions", &[]),
    op("dlock supervise", &[]),
    op("PgLock::migrate", &[]),
    op("MySqlLock::migrate", &[]),
    op("lock_postgres::Fences::create_table", &[]),
    op("lock_mysql::Fences::create_table", &[]),
];

/// How a row's promise is checked for its operation.
#[derive(Clone, Copy, Debug)]
pub enum Check {
    /// By the test function of this name (a suite case, a store's test or a CLI test). The
    /// table's test checks that it exists and that something runs it.
    Case(&'static str),
    /// Not checked yet: why, or what would check it.
    Gap(&'static str),
}

/// One promise checked for one operation.
#[derive(Clone, Copy, Debug)]
pub struct Row {
    /// The promise.
    pub promise: Promise,
    /// The operation's name in [`OPERATIONS`].
    pub op: &'static str,
    /// How.
    pub check: Check,
}

/// The operation named `name`.
pub fn operation(name: &str) -> Option<&'static Operation> {
    OPERATIONS.iter().find(|o| o.name == name)
}

/// Every (operation, promise) that applies and has no row.
pub fn missing_rows() -> Vec<(&'static str, Promise)> {
    let mut out = Vec::new();
    for o in OPERATIONS {
        for p in Promise::ALL {
            if p.applies(o.kinds) && !ROWS.iter().any(|r| r.op == o.name && r.promise == p) {
                out.push((o.name, p));
            }
        }
    }
    out
}

/// Every row whose operation is unknown, or whose promise does not apply to its operation.
pub fn stray_rows() -> Vec<Row> {
    ROWS.iter().filter(|r| operation(r.op).is_none_or(|o| !r.promise.applies(o.kinds))).copied().collect()
}
