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

use crate::error::NAME;
use crate::mode::ModeBackend;
use crate::session::{Sessions, SessionsExt};
use lock_core::backend::{Admin, Notes};

/// What every session-bound mode keeps: the backend's pool (row creation, fence counters,
/// `KILL QUERY`, note reads), the holds, its schema and its round trips.
pub(crate) struct Parts {
    pub(crate) pool: MySqlPool,
    pub(crate) sessions: Sessions,
    pub(crate) schema: Arc<str>,
    pub(crate) notes_schema: Arc<str>,
    pub(crate) trips: Trips,
}

impl Parts {
    pub(crate) fn new(
        pool: MySqlPool,
        sessions: Sessions,
        trips: Trips,
        schema: &Arc<str>,
        notes_schema: &Arc<str>,
    ) -> Self {
        Parts { pool, sessions, trips, schema: schema.clone(), notes_schema: notes_schema.clone() }
    }
}

/// How a session-bound mode takes a lock.
#[async_trait]
pub(crate) trait Recipe: fmt::Debug + Send + Sync + 'static {
    /// What the mode shares with the other session-bound modes.
    fn parts(&self) -> &Parts;

    /// How long the pool the mode takes its holding connections from may take to hand one out.
    fn checkout(&self) -> Duration;

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
        parts.sessions.bounded_attempt(req.wait_until, self.recipe.checkout(), self.recipe.attempt(req)).await
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
