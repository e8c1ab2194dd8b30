//! The holding connection: [`Pinned`] closes a connection that was not handed back cleanly,
//! and [`Driver`] is what `lock_core::backend::session` sends on it (ping, unlock, note).
//!
//! A note is stored in the name's fence row with the hold's fence and backend pid
//! (`sql/notes_set.sql`), and read back only while that pid holds the advisory key and the
//! name's fence is still that hold's (`sql/notes_read.sql`).

use std::sync::Arc;

use lock_core::LockError;
use lock_core::backend::session::{self, Ending, Link, Noted, SessionDriver, Trips};
use sqlx::pool::PoolConnection;
use sqlx::{AssertSqlSafe, Connection, Postgres, Row};
use tokio::time::Instant;

use crate::error::{NAME, classify, is_connection_lost};
use crate::keys::lock_ids;

/// How long past the caller's deadline the client waits for the server's own `lock_timeout`
/// before it cancels the wait itself with `pg_cancel_backend`: long enough for a loaded server
/// to answer its own timeout, short enough that a caller's deadline stays honest.
pub(crate) const CANCEL_GRACE: std::time::Duration = std::time::Duration::from_millis(250);

/// A pooled connection that may carry a session lock, with its backend pid once an answer told
/// it: closed on drop unless its hold ended cleanly (the server then ends the session, and with
/// it every advisory lock and any wait the session still had).
pub(crate) type Pinned = session::Pinned<PoolConnection<Postgres>, i32>;

/// A pinned connection fresh from the pool.
pub(crate) fn pin(conn: PoolConnection<Postgres>) -> Pinned {
    Pinned::new(conn, PoolConnection::close_on_drop)
}

/// Clean connections kept for the next hold.
pub(crate) type Warm = session::Warm<Pinned>;

/// `pg_advisory_unlock` and the session's idle bound restored; the connection, clean, when
/// the session held the lock (it may go back to the pool or be kept). With `noted` (the statement
/// and the lock name), the hold's note is cleared in the same statement.
async fn unlock(
    mut pinned: Pinned,
    key: i64,
    shared: bool,
    idle_before: &str,
    noted: Option<(&Arc<str>, &[u8])>,
    trips: &Trips,
) -> std::result::Result<Option<Pinned>, sqlx::Error> {
    trips.add();
    let sent = Instant::now();
    let query = match noted {
        None if shared => sqlx::query(include_str!("../sql/unlock_shared.sql")).bind(key).bind(idle_before),
        None => sqlx::query(include_str!("../sql/unlock.sql")).bind(key).bind(idle_before),
        Some((stmt, name)) => {
            sqlx::query(AssertSqlSafe(stmt.clone())).bind(key).bind(idle_before).bind(name.to_vec())
        }
    };
    let row = query.fetch_one(&mut **pinned.conn).await?;
    let released: bool = row.try_get(0)?;
    if !released {
        return Ok(None);
    }
    pinned.clean(sent);
    Ok(Some(pinned))
}

/// After a lock wait that failed: a 55P03 or 57014 may have ended the statement after
/// `pg_advisory_lock` granted the key (the fence write waited for a locked row or table), and
/// the grant outlives the statement. Undo it, bounded; the connection is clean only when the
/// server answered, else it is closed on drop.
pub(crate) async fn unlock_stray(mut pinned: Pinned, key: i64, trips: &Trips) {
    let (classid, objid) = lock_ids(key);
    trips.add();
    let sent = Instant::now();
    let undo = sqlx::query(include_str!("../sql/unlock_stray.sql"))
        .bind(key)
        .bind(classid)
        .bind(objid)
        .fetch_optional(&mut **pinned.conn);
    match tokio::time::timeout(CANCEL_GRACE, undo).await {
        Ok(Ok(undone)) => {
            if undone.is_some() {
                tracing::debug!(key, "a failed lock wait had been granted; unlocked");
            }
            pinned.clean(sent);
        }
        Ok(Err(e)) => tracing::debug!(key, error = %e, "checking a failed lock wait's session failed"),
        Err(_) => tracing::debug!(key, "no answer checking a failed lock wait's session"),
    }
}

/// The connection of one hold and what its end restores.
pub(crate) struct Held {
    pub(crate) pinned: Pinned,
    pub(crate) advisory: i64,
    /// A shared hold (`pg_advisory_lock_shared`): unlocked as one (the session toolkit keeps
    /// notes off it).
    pub(crate) shared: bool,
    /// The hold's fence: a note names the hold by it (a shared hold's is the name's latest).
    pub(crate) fence: i64,
    /// The session's `idle_session_timeout` before the grant set it.
    pub(crate) idle_before: String,
    /// A note was stored: the release clears it.
    pub(crate) noted: bool,
}

/// The PostgreSQL side of the holds.
#[derive(Debug)]
pub(crate) struct Driver {
    pub(crate) notes_set: Arc<str>,
    pub(crate) unlock_noted: Arc<str>,
    pub(crate) trips: Trips,
    /// Where a cleanly released connection is kept for the next hold (a pool the builder
    /// opened; a user's pool gets its connections back at once).
    pub(crate) warm: Option<Arc<Warm>>,
}

impl SessionDriver for Driver {
    type Held = Held;
    type Error = sqlx::Error;

    fn name(&self) -> &'static str {
        NAME
    }

    /// A protocol Sync, which also restarts the server's idle clock.
    async fn ping(&self, held: &mut Held) -> Result<(), sqlx::Error> {
        self.trips.add();
        held.pinned.conn.ping().await
    }

    /// Unlock (clearing the note when there is one) and hand the connection back; the same at
    /// release and when the backend was dropped.
    async fn end(&self, key: &str, held: Held, why: Ending) -> Result<bool, sqlx::Error> {
        let Held { pinned, advisory, shared, idle_before, noted, .. } = held;
        let noted = noted.then_some((&self.unlock_noted, key.as_bytes()));
        let Some(clean) = unlock(pinned, advisory, shared, &idle_before, noted, &self.trips).await? else {
            return Ok(false);
        };
        if why == Ending::Release {
            clean.keep(self.warm.as_deref());
        }
        Ok(true)
    }

    /// Store `note` in the name's fence row. A statement error (no note columns, no privilege)
    /// leaves the session lock as it was: advisory locks are not transactional.
    async fn note(&self, key: &str, held: &mut Held, note: &str, link: &mut Link<'_>) -> Noted {
        self.trips.add();
        let set = sqlx::query(AssertSqlSafe(self.notes_set.clone()))
            .bind(key.as_bytes())
            .bind(held.fence)
            .bind(note)
            .execute(&mut **held.pinned.conn);
        match link.send(set).await {
            None => Noted::Lost,
            Some(Err(e)) if is_connection_lost(&e) => {
                tracing::warn!(%key, error = %e, "connection holding a lock died");
                Noted::Lost
            }
            Some(Err(e)) => Noted::Answered(Err(classify(e))),
            Some(Ok(done)) => {
                held.noted |= done.rows_affected() > 0;
                Noted::Answered(Ok(done.rows_affected() > 0))
            }
        }
    }

    fn connection_lost(&self, e: &sqlx::Error) -> bool {
        is_connection_lost(e)
    }

    fn classify(&self, e: sqlx::Error) -> LockError {
        classify(e)
    }
}
