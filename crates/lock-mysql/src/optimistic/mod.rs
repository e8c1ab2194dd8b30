//! Optimistic mode: a lease row taken and released by compare-and-set statements judged by the
//! database clock; `version` is the fencing token.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use lock_core::backend::session::Trips;
use lock_core::backend::{AcquireRequest, Attempt, Grant, Mutex};
use lock_core::{FencingToken, LeaseSignal, LockError, LostReason, OwnerToken, Result};
use sqlx::AssertSqlSafe;
use sqlx::mysql::MySqlPool;
use tokio::time::Instant;

use crate::error::classify;
use crate::notify::Waiters;
use crate::sql::OptimisticSql;

mod acquire;
mod backend;
mod hold;

/// What this client holds of one (key, owner): the version it acquired (CAS operand), its
/// nesting depth, a local bound on the lease, and the lost signal of every acquisition of it.
#[derive(Debug)]
struct Local {
    version: u64,
    count: u32,
    /// No later than the lease's end on the server (counted from request send times).
    until: Instant,
    signals: Vec<LeaseSignal>,
}

impl Local {
    /// Tell every guard of this hold that it is lost.
    fn lost(&self, reason: LostReason) {
        for s in &self.signals {
            s.mark_lost(reason);
        }
    }
}

type LocalMap = HashMap<(String, OwnerToken), Local>;

/// Rows of idle keys are swept (MariaDB) once every this many acquisitions of a client, and
/// local entries of holds whose lease ran out unreleased are dropped as often: rare enough to
/// cost nothing per acquisition, often enough that neither piles up. A sweep deletes up to
/// 1,024 rows, four times what a client that uses every key once creates meanwhile.
const SWEEP_EVERY: u64 = 256;
/// Local entries are kept this long past their lease (the core gave them up before the lease
/// ended, so no release or renewal can still need them).
const LOCAL_GRACE: Duration = Duration::from_secs(1);

/// The optimistic backend state.
pub(crate) struct Optimistic {
    pool: MySqlPool,
    sql: Arc<OptimisticSql>,
    local: Mutex<LocalMap>,
    /// MariaDB: fences come from a sequence, so rows of unused keys may be deleted.
    reclaim: bool,
    acquisitions: AtomicU64,
    /// This process's waiters and holders of the lock space (shared with its other backends).
    waiters: Arc<Waiters>,
    /// Per key, held by an attempt (and by its undo, if it was cut off).
    gates: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    trips: Trips,
    /// The lock space (`MySqlLock::identity`).
    identity: String,
}

impl fmt::Debug for Optimistic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Optimistic").field("held", &self.local.lock().len()).finish()
    }
}

fn owner_bytes(owner: OwnerToken) -> [u8; 16] {
    owner.as_u128().to_be_bytes()
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

impl Optimistic {
    pub(crate) fn new(
        pool: MySqlPool,
        sql: OptimisticSql,
        reclaim: bool,
        waiters: Arc<Waiters>,
        identity: String,
    ) -> Self {
        Optimistic {
            pool,
            sql: Arc::new(sql),
            local: Mutex::default(),
            reclaim,
            acquisitions: Default::default(),
            waiters,
            gates: Mutex::default(),
            trips: Trips::default(),
            identity,
        }
    }

    /// A table created before UTC leases (no `attempt` column) is refused, or upgraded when
    /// the caller says every old client has stopped: its expiry times were written in session
    /// time zones, so old and new clients would disagree about who holds a key.
    async fn check_table(&self, table: &str, upgrade: bool) -> Result<()> {
        let (columns, has_attempt): (i64, i64) =
            sqlx::query_as(include_str!("../../sql/optimistic_has_attempt.sql"))
                .bind(table)
                .fetch_one(&self.pool)
                .await
                .map_err(classify)?;
        if columns == 0 || has_attempt > 0 {
            return Ok(());
        }
        if !upgrade {
            return Err(LockError::InvalidConfig {
                reason: format!(
                    "lock table `{table}` was created by an older lock-mysql whose leases were written in \
                     the session time zone (NOW(6)); stop every client of the older version, then build \
                     once with upgrade_table(true) (frees its leases, keeps versions), or use a new table"
                ),
            });
        }
        sqlx::raw_sql(AssertSqlSafe(self.sql.upgrade.clone())).execute(&self.pool).await.map_err(classify)?;
        Ok(())
    }

    /// Record a grant (`nested`: one more hold of the grant `version` this owner has).
    fn acquired(&self, req: &AcquireRequest<'_>, sent: Instant, version: u64, nested: bool) -> Attempt {
        let until = sent + req.lease;
        let mut local = self.local.lock();
        let fresh = || Local { version, count: 0, until, signals: vec![req.signal.clone()] };
        let e = local.entry((req.key.to_owned(), req.owner)).or_insert_with(fresh);
        if !nested || e.version != version {
            // A new grant: an older hold of this owner still on record ended without a release
            // (its lease ran out); its guards must not outlive it.
            for s in e.signals.iter().filter(|s| !s.same_as(req.signal)) {
                s.mark_lost(LostReason::NotOwner);
            }
            if e.count > 0 {
                self.waiters.released(req.key, req.owner, true);
            }
            *e = fresh();
        } else if !e.signals.iter().any(|s| s.same_as(req.signal)) {
            e.signals.push(req.signal.clone());
        }
        e.count += 1;
        e.until = e.until.max(until);
        drop(local);
        self.waiters.granted(req.key, req.owner, until);
        Attempt::Acquired(Grant { fence: FencingToken(version), lease: Some(req.lease), slot: None })
    }

    /// Drop the local entries of holds whose lease ran out without a release or renewal.
    fn forget_expired(&self) {
        let now = Instant::now();
        self.local.lock().retain(|_, l| l.until + LOCAL_GRACE > now);
        self.waiters.prune();
    }

    /// When a request sent now must have answered: the pool's acquire timeout, the longest this
    /// backend waits for the server to give it a connection at all.
    fn response_bound(&self) -> Instant {
        Instant::now() + self.pool.options().get_acquire_timeout()
    }
}
