//! What the session modes show of a hold without taking it, and force-unlock
//! (`Admin::evict`).
//!
//! Neither a `GET_LOCK` name nor a row lock carries a fencing token on the server, and MariaDB
//! draws tokens from one sequence for every key, so no per-key counter tells the current one
//! either. A hold's note row does: it is written by the holder inside the hold's transaction,
//! with the holding connection's id and the hold's fence, and never committed, so it is visible
//! (read uncommitted) exactly while that hold lasts (`sql/notes_session_insert.sql`). `dlock
//! run` notes every hold; a library hold is noted with `Locker::with_holder`. A hold nobody
//! noted shows no fence, and cannot be evicted by one: the server has nothing that names it.
//!
//! Evicting ends the holding session (`KILL CONNECTION`): a session lock goes only with its
//! session. The check that the connection still carries the inspected hold and the KILL run
//! in one anonymous compound statement on MariaDB, back to back in the server; on MySQL, which
//! has none, one round trip apart. In that window the inspected hold could end and its
//! connection (kept for the next hold) take another before the KILL arrives, which would then
//! end that one: the holder would have to release and be granted again within it.

use std::future::Future;

use lock_core::{FencingToken, Result};
use sqlx::mysql::MySqlRow;
use sqlx::{AssertSqlSafe, Row};
use tokio::time::Instant;

use super::{SessionsExt, no_answer};
use crate::error::{ER_NO_SUCH_TABLE, ER_NO_SUCH_THREAD, classify, db_number};
use crate::session_mode::Parts;
use crate::sql::{Flavor, NotesSql, hex_literal};

/// How the server shows the connection holding a key.
pub(crate) enum HeldBy {
    /// Named mode: `IS_USED_LOCK` of this name expression (a literal that cannot end early).
    Name(String),
    /// Pessimistic mode: a row lock is shown nowhere without the `PROCESS` privilege; only the
    /// holder's note row names its connection.
    Row,
}

impl HeldBy {
    /// The holding connection's id as the server shows it, or `NULL`.
    fn holder(&self) -> String {
        match self {
            HeldBy::Name(name) => format!("IS_USED_LOCK({name})"),
            HeldBy::Row => "NULL".into(),
        }
    }

    /// What a note row's connection must also be: the name's holder, in named mode.
    fn check(&self) -> String {
        match self {
            HeldBy::Name(name) => {
                format!("AND CAST(CONV(HEX(owner), 16, 10) AS UNSIGNED) = IS_USED_LOCK({name})")
            }
            HeldBy::Row => String::new(),
        }
    }
}

/// What the server shows of a key's hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Seen {
    /// The connection the server shows holding it (named mode), or the noted one (pessimistic).
    pub(crate) conn: Option<u64>,
    /// The fence of that hold, where its holder noted it.
    pub(crate) fence: Option<u64>,
}

/// A signed number column that may be NULL.
fn number(row: &MySqlRow, i: usize) -> Result<Option<u64>> {
    let v: Option<i64> = row.try_get(i).map_err(classify)?;
    Ok(v.and_then(|v| u64::try_from(v).ok()))
}

/// The hold of `key` as the server shows it; `None` when the notes table does not exist (the
/// user may not create it: then no hold is noted, and the caller looks without notes).
pub(crate) async fn seen(parts: &Parts, notes: &NotesSql, key: &str, by: &HeldBy) -> Result<Option<Seen>> {
    let text = notes.holder.replace("{key}", &hex_literal(key.as_bytes())).replace("{holder}", &by.holder());
    parts.trips.add();
    let rows = match bounded(parts.sessions.response_bound(), batch(parts, text)).await? {
        Err(e) if db_number(&e) == Some(ER_NO_SUCH_TABLE) => return Ok(None),
        answer => answer.map_err(classify)?,
    };
    let Some(row) = rows.first() else { return Ok(Some(Seen { conn: None, fence: None })) };
    let (shown, fence, noted) = (number(row, 0)?, number(row, 1)?, number(row, 2)?);
    Ok(Some(match by {
        // The note is the shown holder's only if it names the same connection.
        HeldBy::Name(_) => Seen { conn: shown, fence: fence.filter(|_| noted.is_some() && noted == shown) },
        HeldBy::Row => Seen { conn: noted, fence: noted.and(fence) },
    }))
}

/// End the session of `key`'s hold whose fence is `fence`; `false` when no such hold exists
/// (released, passed on, or never noted). Waits, within the server's idle bound, until the
/// server no longer shows the hold.
///
/// # Errors
/// [`LockError::PermissionDenied`] when the hold is another user's and this one lacks
/// `CONNECTION ADMIN` (or `SUPER`); backend failures.
pub(crate) async fn evict(
    parts: &Parts,
    (notes, flavor): (&NotesSql, Flavor),
    key: &str,
    by: &HeldBy,
    fence: FencingToken,
) -> Result<bool> {
    let template = match flavor {
        Flavor::MariaDb => &notes.evict_mariadb,
        Flavor::MySql => &notes.evict_check_mysql,
    };
    let text = template
        .replace("{key}", &hex_literal(key.as_bytes()))
        .replace("{fence}", &fence.0.to_string())
        .replace("{check}", &by.check());
    let bound = parts.sessions.response_bound();
    parts.trips.add();
    let rows = match bounded(bound, batch(parts, text)).await? {
        Ok(rows) => rows,
        // The session ended between the check and the KILL: the hold is gone already.
        Err(e) if db_number(&e) == Some(ER_NO_SUCH_THREAD) => return Ok(false),
        Err(e) => return Err(classify(e)),
    };
    let Some(conn) = rows.last().map(|r| number(r, 0)).transpose()?.flatten() else { return Ok(false) };
    if flavor == Flavor::MySql {
        parts.trips.add();
        let kill = sqlx::query("KILL CONNECTION ?").bind(conn).execute(&parts.pool);
        match bounded(bound, kill).await? {
            Ok(_) => {}
            Err(e) if db_number(&e) == Some(ER_NO_SUCH_THREAD) => return Ok(false),
            Err(e) => return Err(classify(e)),
        }
    }
    gone(parts, notes, key, by, Seen { conn: Some(conn), fence: Some(fence.0) }).await;
    Ok(true)
}

/// Run `text`, a batch that starts with `SET TRANSACTION ISOLATION LEVEL READ UNCOMMITTED`,
/// on a pooled connection. That level is for the next transaction only, which the batch's
/// statement runs in; a statement that fails before it starts one (no such table, a refused
/// KILL) would leave the level to whatever the pool runs next there, so the connection is
/// closed instead of going back.
async fn batch(parts: &Parts, text: String) -> std::result::Result<Vec<MySqlRow>, sqlx::Error> {
    let mut conn = parts.pool.acquire().await?;
    let rows = sqlx::raw_sql(AssertSqlSafe(text)).fetch_all(&mut *conn).await;
    if rows.is_err() {
        conn.close_on_drop();
    }
    rows
}

/// `fut`, or a temporary error once `bound` has passed.
async fn bounded<T>(bound: Instant, fut: impl Future<Output = T>) -> Result<T> {
    tokio::time::timeout_at(bound, fut).await.map_err(|_| no_answer())
}

/// Wait until the server no longer shows the hold `was`: `KILL` marks the session and returns,
/// and the session frees its locks as it ends, which takes the server a moment. Bounded by the
/// server's idle bound; a hold still shown by then is logged, not an error (it was killed).
async fn gone(parts: &Parts, notes: &NotesSql, key: &str, by: &HeldBy, was: Seen) {
    let give_up = parts.sessions.response_bound();
    let mut pause = std::time::Duration::from_millis(1);
    loop {
        match seen(parts, notes, key, by).await {
            Ok(Some(now)) if now.conn == was.conn && (now.fence == was.fence || now.fence.is_none()) => {}
            Ok(_) => return,
            Err(e) => tracing::debug!(%key, error = %e, "looking at an evicted hold failed"),
        }
        if Instant::now() + pause > give_up {
            tracing::warn!(%key, conn = ?was.conn, "the killed holder's session is still shown");
            return;
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(std::time::Duration::from_millis(50));
    }
}
