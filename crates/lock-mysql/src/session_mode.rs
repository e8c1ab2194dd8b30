//! A session-bound mode (pessimistic, named) as a backend: the holds, their renewal, notes and
//! release are the session toolkit's, so the modes differ only in their [`Recipe`]: how a lock
//! is taken, and what can be seen of it without taking it.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lock_core::backend::session::{self, Trips};
use lock_core::backend::{AcquireRequest, Attempt, Capability, LockBackend, LockInfo, RenewItem};
use lock_core::{FencingToken, OwnerToken, Result};
use sqlx::mysql::MySqlPool;
use tokio::time::Instant;

use crate::error::NAME;
use crate::mode::ModeBackend;
use crate::session::{
    Driver, Holding, Kept, Pinned, SessionNotes, Sessions, SessionsExt, granted, next_fence,
};
use crate::sql::{NoteKind, NotesSql};
use lock_core::backend::{Admin, Notes};

/// What every session-bound mode keeps: the backend's pool (row creation, fence counters,
/// `KILL QUERY`, note reads), the holds, the private pool of holding connections and the clean
/// ones kept for the next acquisition, its schema and its round trips.
pub(crate) struct Parts {
    pub(crate) pool: MySqlPool,
    pub(crate) sessions: Sessions,
    /// Holding connections, each set up once with the mode's session settings (the server ends
    /// a holding session silent for the holds' idle bound, and with it the lock).
    pub(crate) holders: MySqlPool,
    /// Clean holding connections kept for the next acquisition (no pool checkout, no return ping).
    pub(crate) warm: Arc<Kept>,
    pub(crate) schema: Arc<str>,
    pub(crate) notes_schema: Arc<str>,
    pub(crate) trips: Trips,
}

/// How a mode's holds end, and how it keeps notes on them.
pub(crate) struct Ends {
    /// Ends a hold at release.
    pub(crate) release: &'static str,
    /// Ends a hold whose backend was dropped.
    pub(crate) abandon: &'static str,
    pub(crate) kind: NoteKind,
    /// Opens the transaction the notes live in (a pessimistic hold is one).
    pub(crate) begin: Option<Arc<str>>,
    /// Ends a hold whose transaction carries a note.
    pub(crate) noted: &'static str,
}

impl Parts {
    /// The parts of a mode whose holding connections are set up by `setup` (a template with
    /// `{idle}` still to fill), whose schema is `schema` and whose holds end as `ends` says.
    /// Needs a runtime (the holders' pool starts its idle reaper).
    pub(crate) fn new(
        pool: MySqlPool,
        (setup, schema, notes): (&'static str, &Arc<str>, &NotesSql),
        ends: Ends,
        keepalive: Duration,
    ) -> Self {
        let trips = Trips::default();
        let kept = SessionNotes {
            kind: ends.kind,
            insert: notes.session_insert.clone(),
            update: notes.session_update.clone(),
            read: notes.session_read.clone(),
            begin: ends.begin,
            end: ends.noted,
        };
        let driver = Driver::new(ends.release, ends.abandon, kept, trips.clone());
        let Holding { sessions, holders, warm } = Holding::new(&pool, setup, driver, keepalive);
        let (schema, notes_schema) = (schema.clone(), notes.schema.clone());
        Parts { pool, sessions, holders, warm, schema, notes_schema, trips }
    }
}

/// A lock the server granted on a holding connection.
pub(crate) struct Locked {
    pub(crate) pinned: Pinned,
    pub(crate) conn_id: u64,
    /// The fencing token the lock statement drew (MariaDB), or `None` (MySQL: drawn after the
    /// grant, [`Parts::hold`]).
    pub(crate) drawn: Option<u64>,
    /// When the granting request was sent (the server's idle clock started no earlier).
    pub(crate) sent: Instant,
    /// After a wait in the server's queue, when its answer arrived.
    pub(crate) answered: Option<Instant>,
}

/// Where a mode draws a MySQL fencing token after the grant, in autocommit.
pub(crate) enum DrawOn {
    /// The holding connection, which has no transaction open (named mode).
    Holder,
    /// Another pooled connection: the holding one has its transaction open, whose rollback
    /// must not take the token back (pessimistic mode).
    Pool,
}

impl Parts {
    /// Hold `locked`: with the fencing token drawn with it or drawn now by `fence_next` (see
    /// [`DrawOn`]), start the keeper and record the hold. If this fails or the future is
    /// dropped, the pinned connection closes and the lock goes with its session.
    pub(crate) async fn hold(
        &self,
        req: &AcquireRequest<'_>,
        mut locked: Locked,
        shared: bool,
        (fence_next, on): (&Arc<str>, DrawOn),
    ) -> Result<Attempt> {
        let fence = match (locked.drawn, on) {
            (Some(f), _) => f,
            (None, DrawOn::Holder) => {
                next_fence(&mut **locked.pinned.conn, fence_next, req.key, &self.trips).await?
            }
            (None, DrawOn::Pool) => next_fence(&self.pool, fence_next, req.key, &self.trips).await?,
        };
        let times = (locked.sent, locked.answered);
        self.sessions.hold(req, granted(locked.pinned, locked.conn_id, (fence, shared), times)?).await
    }
}

/// How a session-bound mode takes a lock.
#[async_trait]
pub(crate) trait Recipe: fmt::Debug + Send + Sync + 'static {
    /// What the mode shares with the other session-bound modes.
    fn parts(&self) -> &Parts;

    /// One attempt to take the lock on a pinned connection and hand it to the holds,
    /// unbounded (a nesting is answered by the holds before it).
    async fn attempt(&self, req: &AcquireRequest<'_>) -> Result<Attempt>;

    /// What the server shows of `key` without taking it.
    async fn inspect(&self, key: &str) -> Result<LockInfo>;

    /// End the hold of `key` whose fence is `fence` ([`Admin::evict`]).
    async fn evict(&self, key: &str, fence: FencingToken) -> Result<bool>;

    /// Whether the mode takes shared holds ([`Capability::shared`]).
    fn shared(&self) -> bool {
        false
    }
}

/// A session-bound mode's backend.
pub(crate) struct SessionMode<R> {
    recipe: R,
    identity: String,
}

impl<R: Recipe> SessionMode<R> {
    pub(crate) fn new(recipe: R, identity: String) -> Self {
        SessionMode { recipe, identity }
    }
}

impl<R: Recipe> fmt::Debug for SessionMode<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.recipe.fmt(f)
    }
}

#[async_trait]
impl<R: Recipe> LockBackend for SessionMode<R> {
    fn name(&self) -> &'static str {
        NAME
    }

    fn identity(&self) -> String {
        self.identity.clone()
    }

    fn capabilities(&self) -> Capability {
        // Waiters queue in the server (row lock or GET_LOCK), in no promised order.
        session::capabilities_with(self.recipe.shared(), true)
    }

    async fn try_acquire(&self, req: &AcquireRequest<'_>) -> Result<Attempt> {
        let parts = self.recipe.parts();
        // One hold is one lock on the server: a nested acquisition is counted in the holds only.
        if let Some(nested) = parts.sessions.nested(req) {
            return Ok(nested);
        }
        // How long the pool of holding connections may take to hand one out.
        let checkout = parts.holders.options().get_acquire_timeout();
        parts.sessions.bounded_attempt(req.wait_until, checkout, self.recipe.attempt(req)).await
    }

    async fn release(&self, key: &str, owner: OwnerToken) -> Result<bool> {
        self.recipe.parts().sessions.release(key, owner).await
    }

    async fn renew(&self, items: &[RenewItem<'_>]) -> Result<Vec<bool>> {
        self.recipe.parts().sessions.renew(items).await
    }

    async fn inspect(&self, key: &str) -> Result<LockInfo> {
        self.recipe.inspect(key).await
    }

    lock_core::backend::hand_out!(notes, admin);
}

#[async_trait]
impl<R: Recipe> Notes for SessionMode<R> {
    async fn set_note(&self, key: &str, owner: OwnerToken, note: &str) -> Result<bool> {
        self.recipe.parts().sessions.set_note(key, owner, note).await
    }

    async fn note(&self, key: &str) -> Result<Option<String>> {
        // Read uncommitted on a pooled connection: only a live hold's transaction carries one.
        let parts = self.recipe.parts();
        parts.sessions.note(&parts.pool, key).await
    }
}

#[async_trait]
impl<R: Recipe> Admin for SessionMode<R> {
    async fn list(&self, _prefix: &str, _limit: usize) -> Result<Vec<String>> {
        Err(lock_core::backend::unsupported(NAME, "listing the locks held"))
    }

    async fn evict(&self, key: &str, fence: FencingToken) -> Result<bool> {
        self.recipe.evict(key, fence).await
    }
}

#[async_trait]
impl<R: Recipe> ModeBackend for SessionMode<R> {
    fn schema(&self) -> Arc<str> {
        self.recipe.parts().schema.clone()
    }

    fn notes_schema(&self) -> Arc<str> {
        self.recipe.parts().notes_schema.clone()
    }

    async fn check_shape(&self, _table: &str, _upgrade: bool) -> Result<()> {
        Ok(())
    }

    #[cfg(feature = "testing")]
    fn held_connection_id(&self, key: &str) -> Option<u64> {
        self.recipe.parts().sessions.held_session(key)
    }

    #[cfg(feature = "testing")]
    fn round_trips(&self) -> u64 {
        self.recipe.parts().trips.get()
    }
}
