//! Classification of driver errors into the library's error type.

use lock_core::LockError;
use sqlx::mysql::MySqlDatabaseError;

/// Backend name used in errors and logs.
pub(crate) const NAME: &str = "mysql";

/// `ER_LOCK_WAIT_TIMEOUT`: lock wait timeout, and MariaDB's answer to `NOWAIT`.
pub(crate) const ER_LOCK_WAIT_TIMEOUT: u16 = 1205;
/// `ER_LOCK_NOWAIT` (MySQL 8): `NOWAIT` on a held row.
pub(crate) const ER_LOCK_NOWAIT: u16 = 3572;
/// `ER_LOCK_DEADLOCK`.
pub(crate) const ER_LOCK_DEADLOCK: u16 = 1213;
/// `ER_QUERY_INTERRUPTED`: the statement was cancelled with `KILL QUERY`.
pub(crate) const ER_QUERY_INTERRUPTED: u16 = 1317;
/// `ER_STATEMENT_TIMEOUT` (MariaDB `max_statement_time`).
pub(crate) const ER_STATEMENT_TIMEOUT_MARIADB: u16 = 1969;
/// `ER_QUERY_TIMEOUT` (MySQL `MAX_EXECUTION_TIME`).
pub(crate) const ER_QUERY_TIMEOUT_MYSQL: u16 = 3024;
/// `ER_NO_SUCH_THREAD`: `KILL` of a session that has ended.
pub(crate) const ER_NO_SUCH_THREAD: u16 = 1094;
/// `ER_KILL_DENIED_ERROR`: `KILL` of another user's session without `CONNECTION ADMIN`/`SUPER`.
pub(crate) const ER_KILL_DENIED: u16 = 1095;
/// `ER_NO_SUCH_TABLE`.
pub(crate) const ER_NO_SUCH_TABLE: u16 = 1146;

/// Server-side error number, if the error came from the server.
pub(crate) fn db_number(e: &sqlx::Error) -> Option<u16> {
    match e {
        sqlx::Error::Database(db) => {
            db.try_downcast_ref::<MySqlDatabaseError>().map(MySqlDatabaseError::number)
        }
        _ => None,
    }
}

/// The row is held by someone else (lock wait timeout, NOWAIT), or our own deadline cut the
/// wait short (statement timeout, KILL QUERY).
pub(crate) fn is_contention(e: &sqlx::Error) -> bool {
    matches!(
        db_number(e),
        Some(
            ER_LOCK_WAIT_TIMEOUT
                | ER_LOCK_NOWAIT
                | ER_QUERY_INTERRUPTED
                | ER_STATEMENT_TIMEOUT_MARIADB
                | ER_QUERY_TIMEOUT_MYSQL
        )
    )
}

/// The connection (and with it any transaction and row lock it carried) is gone.
pub(crate) fn is_connection_lost(e: &sqlx::Error) -> bool {
    // An untrusted certificate arrives as an IO error, but no connection was ever made.
    if matches!(e, sqlx::Error::Tls(_)) || lock_core::is_tls_refusal(e) {
        return false;
    }
    match e {
        sqlx::Error::Io(_) | sqlx::Error::Protocol(_) | sqlx::Error::WorkerCrashed => true,
        // 1053 server shutdown, 1927 connection killed (MariaDB), 4031 idle timeout (MySQL).
        _ => matches!(db_number(e), Some(1053 | 1927 | 4031)),
    }
}

/// The server refused a statement before running it (no such table or column, no privilege):
/// an open transaction on the connection is untouched.
pub(crate) fn is_refused(e: &sqlx::Error) -> bool {
    // 1044/1142/1143/1227 denied, 1146 no such table, 1054 unknown column.
    matches!(db_number(e), Some(1044 | 1142 | 1143 | 1227 | 1146 | 1054))
}

/// Whether retrying may help: connection loss, pool timeouts, lock waits and deadlocks, a
/// server that is shutting down, read-only or out of connections.
pub(crate) fn is_temporary(e: &sqlx::Error) -> bool {
    if is_connection_lost(e) || is_contention(e) {
        return true;
    }
    match e {
        sqlx::Error::PoolTimedOut => true,
        // 1040 too many connections, 1213 deadlock, 1290/1836 read-only (failover), 2006/2013 gone away.
        _ => matches!(db_number(e), Some(1040 | ER_LOCK_DEADLOCK | 1290 | 1836 | 2006 | 2013)),
    }
}

/// The library error for a driver error: temporary or permanent (auth, syntax, missing table,
/// missing privilege, decoding).
pub(crate) fn classify(e: sqlx::Error) -> LockError {
    // 1044 database access denied, 1045 access denied (password), 1142/1143 table/column
    // command denied, 1227 needs a privilege, 1370 routine denied, 1095 KILL of another
    // user's session (force-unlock).
    if matches!(db_number(&e), Some(1044 | 1045 | 1142 | 1143 | 1227 | 1370 | ER_KILL_DENIED)) {
        LockError::permission_denied(NAME, e)
    } else if is_temporary(&e) {
        LockError::temporary(NAME, e)
    } else {
        LockError::permanent(NAME, e)
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
}
