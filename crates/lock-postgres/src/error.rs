//! Classification of driver errors into the library's error type, by SQLSTATE.

use lock_core::LockError;

/// Backend name used in errors and logs.
pub(crate) const NAME: &str = "postgres";

/// `lock_not_available`: `lock_timeout` ended an advisory-lock wait.
pub(crate) const LOCK_NOT_AVAILABLE: &str = "55P03";
/// `query_canceled`: the wait was cancelled with `pg_cancel_backend` (our deadline).
pub(crate) const QUERY_CANCELED: &str = "57014";
/// `invalid_sql_statement_name` ("prepared statement ... does not exist") and
/// `duplicate_prepared_statement`: the connection's prepared statements are not on the server
/// session its statement ran on, or another client's are.
const PREPARED_GONE: &str = "26000";
const PREPARED_TAKEN: &str = "42P05";
/// `protocol_violation`: with "bind message supplies N parameters, but prepared statement ...
/// requires M", the statement of that name on this server session is another client's.
const PROTOCOL_VIOLATION: &str = "08P01";
/// `insufficient_privilege`.
pub(crate) const INSUFFICIENT_PRIVILEGE: &str = "42501";

/// The server's SQLSTATE, if the error came from the server.
pub(crate) fn sqlstate(e: &sqlx::Error) -> Option<String> {
    match e {
        sqlx::Error::Database(db) => db.code().map(|c| c.into_owned()),
        _ => None,
    }
}

/// The wait ended without a grant: `lock_timeout` fired, or our own cancel cut it short.
pub(crate) fn is_contention(e: &sqlx::Error) -> bool {
    matches!(sqlstate(e).as_deref(), Some(LOCK_NOT_AVAILABLE | QUERY_CANCELED))
}

/// The connection (and with it every session lock it carried) is gone.
pub(crate) fn is_connection_lost(e: &sqlx::Error) -> bool {
    // An untrusted certificate arrives as an IO error, but no connection was ever made.
    if matches!(e, sqlx::Error::Tls(_)) || lock_core::is_tls_refusal(e) {
        return false;
    }
    match e {
        sqlx::Error::Io(_) | sqlx::Error::Protocol(_) | sqlx::Error::WorkerCrashed => true,
        // Class 08 connection exception; 57P01 admin_shutdown (pg_terminate_backend, a fast
        // shutdown), 57P02 crash_shutdown, 57P03 cannot_connect_now, 57P05
        // idle_session_timeout.
        _ => sqlstate(e).is_some_and(|c| {
            c.starts_with("08") || matches!(c.as_str(), "57P01" | "57P02" | "57P03" | "57P05")
        }),
    }
}

/// Whether retrying may help: connection loss, pool timeouts, lock waits, serialization
/// failures and deadlocks, a server out of resources or in recovery.
pub(crate) fn is_temporary(e: &sqlx::Error) -> bool {
    if is_connection_lost(e) || is_contention(e) {
        return true;
    }
    match e {
        sqlx::Error::PoolTimedOut => true,
        // 40001 serialization failure, 40P01 deadlock, class 53 insufficient resources (53300
        // too many connections), 25006 read-only transaction (a standby after failover).
        _ => sqlstate(e)
            .is_some_and(|c| c.starts_with("53") || matches!(c.as_str(), "40001" | "40P01" | "25006")),
    }
}

/// The library error for a driver error: permission denied for a missing grant or refused
/// credentials (class 28, as lock-mysql's access denied: never temporary, and `dlock` exits
/// with "credentials or permission refused"), temporary, or permanent (syntax, a missing
/// database or table, decoding).
pub(crate) fn classify(e: sqlx::Error) -> LockError {
    let state = sqlstate(&e);
    // The driver prepares each statement once per connection: only a proxy that runs a
    // client's transactions on different server sessions loses them (or a DEALLOCATE/DISCARD
    // sent on a connection of the caller's pool).
    let other_clients =
        state.as_deref() == Some(PROTOCOL_VIOLATION) && e.to_string().contains("prepared statement");
    if matches!(state.as_deref(), Some(PREPARED_GONE | PREPARED_TAKEN)) || other_clients {
        return pooled(&format!("the server answered \"{e}\" for a prepared statement"));
    }
    if state.as_deref() == Some(INSUFFICIENT_PRIVILEGE) {
        match missing_grant(&e.to_string()) {
            Some(hint) => LockError::permission_denied(NAME, format!("{e}: {hint}")),
            None => LockError::permission_denied(NAME, e),
        }
    } else if state.as_deref().is_some_and(|c| c.starts_with("28")) {
        LockError::permission_denied(NAME, e)
    } else if is_temporary(&e) {
        LockError::temporary(NAME, e)
    } else {
        LockError::permanent(NAME, e)
    }
}

/// What a role refused `message` lacks, as the statement that grants it: a second application
/// role (not the owner of the library's tables) needs grants on them, and evicting another
/// role's holder needs `pg_signal_backend` (README, "Least-privilege setup").
fn missing_grant(message: &str) -> Option<String> {
    if message.contains("permission denied to terminate process") {
        return Some(
            "evicting another role's holder needs GRANT pg_signal_backend TO <role> (or membership in \
             the holder's role); see lock-postgres's README, \"Least-privilege setup\""
                .into(),
        );
    }
    let table = message.split("permission denied for table ").nth(1)?.split_whitespace().next()?;
    // The records table is also deleted from (a latch's or a stored count's removal).
    let privileges =
        if table.ends_with("_recs") { "SELECT, INSERT, UPDATE, DELETE" } else { "SELECT, INSERT, UPDATE" };
    Some(format!(
        "the role needs GRANT {privileges} ON {table} TO <role>; see lock-postgres's README, \"Least-privilege setup\""
    ))
}

/// The refusal of a transaction-pooling proxy; `seen` says how it showed.
pub(crate) fn pooled(seen: &str) -> LockError {
    LockError::InvalidConfig {
        reason: format!(
            "PostgreSQL is reached through a transaction-pooling proxy (PgBouncer pool_mode = \
             transaction or statement): {seen}, so a session lock would stay with a server session \
             other clients get next. Connect to PostgreSQL directly or through a session-pooling \
             port; code that runs in a transaction through the proxy can take \
             PgLock::lock_in_transaction with a PgLock built on a direct connection"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_pool_and_io_errors_as_temporary() {
        assert!(classify(sqlx::Error::PoolTimedOut).is_temporary());
        let io = sqlx::Error::Io(std::io::Error::from(std::io::ErrorKind::UnexpectedEof));
        assert!(is_connection_lost(&io));
        assert!(classify(io).is_temporary());
        assert!(!classify(sqlx::Error::RowNotFound).is_temporary());
    }

    #[test]
    fn a_missing_grant_is_named() {
        let fence = missing_grant("error returned from database: permission denied for table dlock_fence");
        assert!(fence.is_some_and(|h| h.contains("GRANT SELECT, INSERT, UPDATE ON dlock_fence TO")));
        let recs = missing_grant("permission denied for table jobs_recs").expect("named");
        assert!(recs.contains("GRANT SELECT, INSERT, UPDATE, DELETE ON jobs_recs TO"), "{recs}");
        let kill = missing_grant("permission denied to terminate process").expect("named");
        assert!(kill.contains("pg_signal_backend"), "{kill}");
        assert_eq!(missing_grant("permission denied for schema public"), None);
    }
}
