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
///
/// A search or kill that fails (a pool checkout past its bound on a loaded machine, a dropped
/// connection) is tried again until then: giving up on the first error would leave the wait
/// queued on the server until its own timeout, ahead of every later waiter.
pub(crate) async fn kill_marked(pool: MySqlPool, wait: WaitOf, trips: Trips) -> Result<()> {
    let give_up = Instant::now() + MARK_SEARCH;
    let mut pause = Duration::from_millis(1);
    loop {
        let failed = match find_and_kill(&pool, &wait, &trips).await {
            Ok(true) => return Ok(()),
            Ok(false) => None,
            Err(e) => Some(e),
        };
        if Instant::now() + pause > give_up {
            return failed.map_or(Ok(()), Err);
        }
        if let Some(e) = failed {
            tracing::debug!(error = %e, "mysql lock wait: looking for the dropped wait again");
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

/// One look for `wait` in the process list, and its `KILL QUERY` if found: whether it was.
async fn find_and_kill(pool: &MySqlPool, wait: &WaitOf, trips: &Trips) -> Result<bool> {
    trips.add();
    let find = match wait {
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
    .fetch_optional(pool);
    // A signed BIGINT in the process list.
    let id: Option<i64> = answered_by(Instant::now() + KILL_BOUND, find).await?;
    match id.and_then(|id| u64::try_from(id).ok()) {
        Some(id) => kill_query(pool.clone(), id, trips.clone()).await.map(|()| true),
        None => Ok(false),
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

#[cfg(test)]
mod tests {
    use sqlx::mysql::MySqlPoolOptions;
    use sqlx::{Connection, Executor};

    use super::*;

    /// A search whose pool checkout runs past its bound (every connection busy, as on a loaded
    /// machine) is tried again, so the dropped wait is still killed once a connection frees up,
    /// not left queued until its own 30 s timeout.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_search_that_fails_is_tried_again_until_the_wait_is_killed() {
        let url = lock_mysql_testing::shared_mariadb().url();
        let mut holder = sqlx::MySqlConnection::connect(&url).await.expect("connect");
        let held: Option<i64> = sqlx::query_scalar("SELECT GET_LOCK('kill-retry', 0)")
            .fetch_one(&mut holder)
            .await
            .expect("hold");
        assert_eq!(held, Some(1));
        let pool = MySqlPoolOptions::new().max_connections(2).connect(&url).await.expect("pool");
        let mut waiter = pool.acquire().await.expect("checkout");
        let id: u64 = sqlx::query_scalar("SELECT CAST(CONNECTION_ID() AS UNSIGNED)")
            .fetch_one(&mut *waiter)
            .await
            .expect("id");
        let wait = tokio::spawn(async move {
            let started = Instant::now();
            let _: Option<i64> = sqlx::query_scalar("SELECT GET_LOCK('kill-retry', 30)")
                .fetch_one(&mut *waiter)
                .await
                .expect("wait");
            started.elapsed()
        });
        // The pool's other connection stays busy past the first search's bound.
        let busy = pool.acquire().await.expect("checkout");
        let free_later = tokio::spawn(async move {
            tokio::time::sleep(KILL_BOUND + Duration::from_millis(300)).await;
            drop(busy);
        });
        kill_marked(pool, WaitOf::Session(id), Trips::default()).await.expect("the wait was killed");
        free_later.await.expect("free");
        let waited = tokio::time::timeout(Duration::from_secs(5), wait)
            .await
            .expect("the wait ended")
            .expect("waiter");
        assert!(waited < Duration::from_secs(10), "the wait ran {waited:?}, to its own timeout");
        holder.execute("DO RELEASE_LOCK('kill-retry')").await.expect("release");
    }
}
