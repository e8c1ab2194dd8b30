//! Refusing a transaction-pooling proxy in front of PostgreSQL (PgBouncer's `pool_mode =
//! transaction` or `statement`): it runs each transaction on whichever server session is free,
//! so a session advisory lock would stay with a server session that other clients get next, and
//! the holder's unlock could run on another one.
//!
//! Told when building, from the server's side. A connection the server sees on another port
//! than the one dialled is forwarded; then a probe connection `LISTEN`s on a fresh channel and
//! goes idle, and a second connection notifies it. The server sends the notification at once
//! to the probe's session, and a connection bound to that session (direct, a TCP proxy, a
//! session pooler) receives it while idle; a pooler that hands sessions out per transaction has
//! unlinked the idle client from it and delivers nothing. Which sessions the pooler picks, and
//! how busy it is, does not matter. (Such a pooler keeps the undelivered notification on that
//! server session for its next client there, which most drivers ignore; sqlx takes it for a
//! broken connection: a misconfiguration is refused at the cost of at most one such error.)

use std::time::Duration;

use lock_core::backend::session::connect_first;
use lock_core::{LockError, OwnerToken, Result};
use sqlx::postgres::{PgConnectOptions, PgConnection, PgListener, PgPool};
use sqlx::{AssertSqlSafe, Executor, Row};
use tokio::time::Instant;

use crate::error::{NAME, classify, pooled};

/// The server session and the port the server was reached on (`NULL` over a unix socket). The
/// simple query protocol throughout: a prepared statement would not survive a transaction
/// pooler.
const WHO: &str = "SELECT pg_backend_pid(), inet_server_port()";

/// How long an idle probe may take to receive its notification, beyond the link's round
/// trips: on a loaded machine a few scheduling delays, far under this; a transaction pooler
/// never delivers it.
const DELIVERY: Duration = Duration::from_secs(2);

/// The server session of `conn` and the port the server answered on, within `timeout`.
async fn who(conn: &mut PgConnection, timeout: Duration) -> Result<(i32, Option<i32>)> {
    let row = connect_first(NAME, timeout, conn.fetch_one(sqlx::raw_sql(WHO)), classify).await?;
    Ok((row.try_get(0).map_err(classify)?, row.try_get(1).map_err(classify)?))
}

/// Whether `first` reaches the server through something in between (a pooler, a TCP proxy),
/// not on the socket or port that `opts` dial.
pub(crate) async fn forwarded(
    first: &mut PgConnection,
    opts: &PgConnectOptions,
    timeout: Duration,
) -> Result<bool> {
    let (_, port) = who(first, timeout).await?;
    let direct = match (opts.get_socket(), port) {
        (Some(_), None) => true,
        (None, Some(port)) => port == i32::from(opts.get_port()),
        _ => false,
    };
    Ok(!direct)
}

fn no_answer() -> LockError {
    LockError::temporary(NAME, "no answer in time while probing for a transaction pooler")
}

/// `fut` by `deadline`, else a temporary error.
async fn by<T>(
    deadline: Instant,
    fut: impl std::future::Future<Output = std::result::Result<T, sqlx::Error>>,
) -> Result<T> {
    match tokio::time::timeout_at(deadline, fut).await {
        Ok(Err(e)) if foreign_notification(&e) => Err(pooled(
            "a client connection that listens on nothing received a notification, meant for a \
             server session another client had used",
        )),
        Ok(r) => r.map_err(classify),
        Err(_) => Err(no_answer()),
    }
}

/// The driver's error for a notification on a connection that does not listen: it ran on a
/// server session where another client had (another build's probe, say).
fn foreign_notification(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Protocol(m) if m.contains("NotificationResponse"))
}

/// Refuse unless a connection of `pool` stays on its server session while idle: see the
/// module. `watcher` is another connection to the same place. Within `timeout`.
pub(crate) async fn refuse_transaction_pooling(
    pool: &PgPool,
    watcher: &mut PgConnection,
    timeout: Duration,
) -> Result<()> {
    let deadline = Instant::now() + timeout;
    let mut probe = by(deadline, PgListener::connect_with(pool)).await?;
    // A lost connection is an error here, not a reason to connect again.
    probe.eager_reconnect(false);
    let channel = format!("dlock_probe_{}", OwnerToken::random());
    let listen = format!("LISTEN {channel}; SELECT pg_backend_pid()");
    let rows = by(deadline, sqlx::raw_sql(AssertSqlSafe(listen)).fetch_all(&mut probe)).await?;
    let pid: i32 = match rows.first() {
        Some(row) => row.try_get(0).map_err(classify)?,
        None => return Err(LockError::permanent(NAME, "no backend pid in the probe's answer")),
    };
    // Not from the probe's own session: a transaction pooler would then deliver it to the
    // watcher, whose driver takes a notification for a broken connection.
    let notify = format!(
        "SELECT pg_backend_pid(), CASE WHEN pg_backend_pid() <> {pid} THEN pg_notify('{channel}', '')::text END"
    );
    let sent = Instant::now();
    let row = by(deadline, watcher.fetch_one(sqlx::raw_sql(AssertSqlSafe(notify)))).await?;
    // A slow link delays the delivery too: a round trip's worth more, twice over.
    let wanted = DELIVERY + sent.elapsed() * 2;
    let notifier: i32 = row.try_get(0).map_err(classify)?;
    if notifier == pid {
        return Err(pooled(&format!("two client connections ran on one server session (pid {pid})")));
    }
    let wait = wanted.min(deadline.saturating_duration_since(Instant::now()));
    match tokio::time::timeout(wait, probe.try_recv()).await {
        Ok(Ok(Some(n))) if n.channel() == channel => Ok(()),
        // Only another client's LISTEN, on the server session the probe then ran on, sends that.
        Ok(Ok(Some(n))) => Err(pooled(&format!(
            "a client connection received a notification on {}, which another client listened to",
            n.channel()
        ))),
        Ok(Ok(None)) => {
            Err(LockError::temporary(NAME, "connection lost while probing for a transaction pooler"))
        }
        Ok(Err(e)) => Err(classify(e)),
        // Cut short by the build's own bound: no verdict.
        Err(_) if wait < wanted => Err(no_answer()),
        Err(_) => Err(pooled(&format!(
            "a notification to the server session (pid {pid}) of an idle client connection did not \
             reach it within {wait:?}"
        ))),
    }
}
