//! Holding connections: the private pool they come from, each set up once with the holder's
//! session settings, and the clean ones kept for the next acquisition.

use std::sync::Arc;
use std::time::Duration;

use lock_core::backend::{AcquireRequest, session};
use sqlx::AssertSqlSafe;
use sqlx::mysql::{MySqlPool, MySqlPoolOptions};

use lock_core::Result;

use super::{Driver, KILL_GRACE, Pinned, Sessions, pin, server_idle};
use crate::error::classify;

/// What a session-bound mode holds with: the holds, the private pool of holding connections,
/// and the clean ones kept for the next acquisition.
pub(crate) struct Holding {
    pub(crate) sessions: Sessions,
    pub(crate) holders: MySqlPool,
    pub(crate) warm: Arc<Kept>,
}

impl Holding {
    /// Holding connections opened like `pool`'s and set up with `setup` (a template with
    /// `{idle}`, the server's idle bound in seconds, still to fill), holds ended by `driver`.
    /// Needs a runtime (the holders' pool starts its idle reaper).
    pub(crate) fn new(pool: &MySqlPool, setup: &str, driver: Driver, keepalive: Duration) -> Self {
        let idle = server_idle(keepalive);
        // A holding connection is handed out only within the first third of the server's idle
        // bound since its last statement was sent: far from being ended by the server.
        let fresh = idle / 3;
        let setup = setup.replace("{idle}", &idle.as_secs().to_string()).into();
        let holders = holders_pool(pool, setup, fresh);
        let warm = Kept::new(fresh, &holders);
        let sessions = Sessions::new(driver.with_warm(warm.clone()), keepalive, idle);
        Holding { sessions, holders, warm }
    }
}

/// Clean holding connections kept for the next acquisition ([`session::Warm`]): holding
/// connections come from a private pool and carry the holder's session settings
/// ([`holders_pool`]), so a kept one is only handed out while its session is far from the
/// server's idle bound (`fresh`, counted from when its last statement was sent); a sweeper hands
/// older ones back to the pool (whose return ping restarts the server's idle clock, or finds the
/// session gone and closes the connection).
pub(crate) struct Kept(Arc<session::Warm<Pinned>>);

impl Kept {
    /// Keep connections of `holders` for `fresh` after their last statement's send, except
    /// while every connection of that pool is out. Needs a runtime.
    pub(crate) fn new(fresh: Duration, holders: &MySqlPool) -> Arc<Self> {
        let holders = holders.clone();
        let pressed =
            move || holders.num_idle() == 0 && holders.size() >= holders.options().get_max_connections();
        Arc::new(Kept(session::Warm::new(fresh, pressed)))
    }

    /// A clean holding connection for the next hold of `req`: a kept one, or one from
    /// `holders`. `None` when the caller's deadline (with the grace of a wait, [`KILL_GRACE`])
    /// passed first: a pool that must open a connection to a silent server would otherwise
    /// wait out the whole attempt's bound, a second past the deadline.
    pub(crate) async fn pinned(
        &self,
        holders: &MySqlPool,
        req: &AcquireRequest<'_>,
    ) -> Result<Option<Pinned>> {
        if let Some(p) = self.0.take() {
            return Ok(Some(p));
        }
        let conn = match req.wait_until {
            Some(deadline) => match tokio::time::timeout_at(deadline + KILL_GRACE, holders.acquire()).await {
                Ok(conn) => conn,
                Err(_) => return Ok(None),
            },
            None => holders.acquire().await,
        };
        Ok(Some(pin(conn.map_err(classify)?)))
    }

    /// Keep `p`, if its hold ended cleanly, for the next acquisition.
    pub(crate) fn put(&self, p: Pinned) {
        self.0.put(p);
    }
}

/// The private pool of holding connections: the connect options and size of the backend's pool
/// (a user's pool keeps its connections to itself), each connection set up once with `setup`
/// (the mode's session settings: the idle bound, and autocommit off for row locks). A connection idle in this pool still carries that
/// bound, so the server would end it: one idle in the pool for `fresh` is closed by the reaper
/// and never handed out (`before_acquire` checks locally, no round trip), so a holder never
/// starts on a session the server is about to end.
fn holders_pool(pool: &MySqlPool, setup: Arc<str>, fresh: Duration) -> MySqlPool {
    let opts = pool.options();
    MySqlPoolOptions::new()
        .max_connections(opts.get_max_connections())
        .acquire_timeout(opts.get_acquire_timeout())
        // No ping per checkout: a dead connection fails its lock statement with a temporary
        // error (retried by the core), and sqlx pings on return anyway.
        .test_before_acquire(false)
        .idle_timeout(fresh)
        .before_acquire(move |_, meta| Box::pin(async move { Ok(meta.idle_for < fresh) }))
        .after_connect(move |conn, _| {
            let setup = setup.clone();
            Box::pin(async move { sqlx::raw_sql(AssertSqlSafe(setup)).execute(conn).await.map(drop) })
        })
        .connect_lazy_with((*pool.connect_options()).clone())
}
