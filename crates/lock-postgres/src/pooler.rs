//! Refusing a transaction-pooling proxy in front of PostgreSQL (PgBouncer's `pool_mode =
//! transaction` or `statement`): it runs each transaction on whichever server session is free,
//! so a session advisory lock would stay with a server session that other clients get next, and
//! the holder's unlock could run on another one. Told when building, from the server's side: a
//! connection the server sees on another port than the one dialled is forwarded, and then two
//! client connections open at once that run on one server session are pooled per transaction.

use std::time::Duration;

use lock_core::backend::session::connect_first;
use lock_core::{LockError, Result};
use sqlx::postgres::{PgConnectOptions, PgConnection};
use sqlx::{Executor, Row};

use crate::error::{NAME, classify};

/// The server session and the port the server was reached on (`NULL` over a unix socket). The
/// simple query protocol: a prepared statement would not survive a transaction pooler.
const WHO: &str = "SELECT pg_backend_pid(), inet_server_port()";

/// The server session of `conn` and the port the server answered on, within `timeout`.
async fn who(conn: &mut PgConnection, timeout: Duration) -> Result<(i32, Option<i32>)> {
    let row = connect_first(NAME, timeout, conn.fetch_one(sqlx::raw_sql(WHO)), classify).await?;
    Ok((row.try_get(0).map_err(classify)?, row.try_get(1).map_err(classify)?))
}

/// `Some(pid)` of `first`'s server session when its connection reaches the server through
/// something in between (a pooler, a TCP proxy), `None` when the server answers on the socket
/// or port that `opts` dial.
pub(crate) async fn forwarded(
    first: &mut PgConnection,
    opts: &PgConnectOptions,
    timeout: Duration,
) -> Result<Option<i32>> {
    let (pid, port) = who(first, timeout).await?;
    let direct = match (opts.get_socket(), port) {
        (Some(_), None) => true,
        (None, Some(port)) => port == i32::from(opts.get_port()),
        _ => false,
    };
    Ok((!direct).then_some(pid))
}

/// Refuse when `second`, open at the same time as `first` (whose server session was `pid`),
/// runs on the same server session as `first`: only a transaction (or statement) pooler does
/// that, and PgBouncer's default (most recently released session first) makes it certain.
pub(crate) async fn refuse_shared_sessions(
    first: &mut PgConnection,
    second: &mut PgConnection,
    pid: i32,
    timeout: Duration,
) -> Result<()> {
    let (other, _) = who(second, timeout).await?;
    let (again, _) = who(first, timeout).await?;
    if other != pid && other != again {
        return Ok(());
    }
    Err(LockError::InvalidConfig {
        reason: format!(
            "PostgreSQL is reached through a transaction-pooling proxy (PgBouncer pool_mode = \
             transaction or statement): two client connections ran on one server session (pid \
             {other}), so a session lock would stay with a server session other clients get next. \
             Connect to PostgreSQL directly or through a session-pooling port; code that runs in a \
             transaction through the proxy can take PgLock::lock_in_transaction with a PgLock built \
             on a direct connection"
        ),
    })
}
