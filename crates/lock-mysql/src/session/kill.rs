//! Ending a lock wait from another connection (`KILL QUERY`): when its future is dropped, when
//! the server has not answered a grace after the deadline, or, before the wait's connection
//! id is known, found in the process list by the statement's mark.

use std::future::Future;
use std::time::Duration;

use lock_core::Result;
use lock_core::backend::session::{self, Trips};
use sqlx::mysql::MySqlPool;
use tokio::time::Instant;

use super::{KILL_GRACE, answered_by};

/// End the lock wait running on connection `conn_id`. Our own user's threads may always be
/// killed; an "unknown thread" error just means the wait is over. Bounded: a wait the kill does
/// not reach in time still ends, with the server's own timeout or with its closed session.
async fn kill_query(pool: MySqlPool, conn_id: u64, trips: Trips) -> Result<()> {
    trips.add();
    let kill = sqlx::query("KILL QUERY ?").bind(conn_id).execute(&pool);
    answered_by(Instant::now() + KILL_BOUND, kill).await.map(drop)
}

/// What marks a lock wait's statement in the server's process list (a comment before it,
/// then a random token): how [`kill_marked`] finds a wait whose connection id never arrived.
pub(crate) const WAIT_MARK: &str = "dlock-wait ";

/// How [`kill_marked`] recognises a dropped lock wait in the server's process list.
pub(crate) enum WaitOf {
    /// Its statement carries this mark after [`WAIT_MARK`]: a batch whose connection id never
    /// arrived.
    Mark(String),
    /// It is the `GET_LOCK` running on this session: a wait on a connection whose id is known,
    /// dropped perhaps before the wait started (a `KILL QUERY` then would come too early).
    Session(u64),
}

/// `KILL QUERY` the lock wait `wait`, found in the process list: the undo of a waiting
/// statement dropped before the client knew the wait had started. It may not have reached its
/// `GET_LOCK` yet, so it is looked for until found or [`MARK_SEARCH`] has passed (a statement
/// that never reached the server is never found, and one that runs later than that ends at its
/// own timeout; a grant it gets goes with the connection, which the dropped attempt closed).
pub(crate) async fn kill_marked(pool: MySqlPool, wait: WaitOf, trips: Trips) -> Result<()> {
    let give_up = Instant::now() + MARK_SEARCH;
    let mut pause = Duration::from_millis(1);
    loop {
        trips.add();
        let find = match &wait {
            WaitOf::Mark(mark) => sqlx::query_scalar(concat!(
                "SELECT ID FROM information_schema.PROCESSLIST",
                // Never this query itself, whose text may show the mark it looks for.
                " WHERE INFO LIKE ? AND ID <> CONNECTION_ID() LIMIT 1"
            ))
            .bind(format!("%{WAIT_MARK}{mark}%")),
            WaitOf::Session(id) => sqlx::query_scalar(
                "SELECT ID FROM information_schema.PROCESSLIST WHERE ID = ? AND INFO LIKE '%GET\\_LOCK(%'",
            )
            .bind(*id),
        }
        .fetch_optional(&pool);
        // A signed BIGINT in the process list.
        let id: Option<i64> = answered_by(Instant::now() + KILL_BOUND, find).await?;
        if let Some(id) = id.and_then(|id| u64::try_from(id).ok()) {
            return kill_query(pool, id, trips).await;
        }
        if Instant::now() + pause > give_up {
            return Ok(());
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

/// How long [`kill_marked`] looks for a dropped batch's wait.
const MARK_SEARCH: Duration = Duration::from_secs(3);

/// How long a `KILL QUERY` may take, its pool checkout included.
const KILL_BOUND: Duration = Duration::from_secs(2);

/// Run `wait`, a lock wait on connection `conn_id` that the server ends by itself at
/// `deadline`, killed (`KILL QUERY`) if this future is dropped mid-wait or the server has not
/// answered [`KILL_GRACE`] after the deadline (see [`session::cancellable_wait`]). `None`: no
/// answer even after the kill; the caller drops the connection, which closes it.
pub(crate) async fn killable_wait<T>(
    pool: &MySqlPool,
    conn_id: u64,
    deadline: Instant,
    trips: &Trips,
    wait: impl Future<Output = T>,
) -> Option<T> {
    let (pool, trips) = (pool.clone(), trips.clone());
    let kill = move || kill_query(pool.clone(), conn_id, trips.clone());
    session::cancellable_wait("mysql lock wait", (deadline, KILL_GRACE), kill, wait).await.answer
}
