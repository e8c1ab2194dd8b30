//! Turning `redis` errors into [`LockError`]s.

use lock_core::LockError;
use redis::{ErrorKind, RedisError, ServerErrorKind};

/// Backend name used in errors and logs.
pub(crate) const NAME: &str = "redis";

/// Whether retrying the same command may succeed: connection loss, timeouts, a server that is
/// loading, busy with a script, failing over or resharding. Authentication, ACL refusals,
/// WRONGTYPE, script errors and protocol mismatches are permanent.
pub(crate) fn is_temporary(e: &RedisError) -> bool {
    // An untrusted certificate looks like an IO error, but no retry will fix it.
    if lock_core::is_tls_refusal(e) {
        return false;
    }
    if e.is_timeout() || e.is_connection_dropped() || e.is_connection_refusal() {
        return true;
    }
    match e.kind() {
        ErrorKind::Io | ErrorKind::ClusterConnectionNotFound => true,
        ErrorKind::Server(k) => matches!(
            k,
            ServerErrorKind::BusyLoading
                | ServerErrorKind::TryAgain
                | ServerErrorKind::ClusterDown
                | ServerErrorKind::MasterDown
                | ServerErrorKind::ReadOnly
                | ServerErrorKind::Moved
                | ServerErrorKind::Ask
        ),
        ErrorKind::Extension => e.code() == Some("BUSY"),
        _ => false,
    }
}

/// A [`LockError::Backend`] with the retryability decided here, where the error is born.
pub(crate) fn classify(e: RedisError) -> LockError {
    let denied = matches!(e.kind(), redis::ErrorKind::AuthenticationFailed)
        || matches!(e.code(), Some("NOPERM" | "WRONGPASS" | "NOAUTH"));
    if denied {
        LockError::permission_denied(NAME, e)
    } else if is_temporary(&e) {
        LockError::temporary(NAME, e)
    } else {
        LockError::permanent(NAME, e)
    }
}

/// A reply of an unexpected shape (a script answering something it never answers).
pub(crate) fn bad_reply(what: &'static str) -> LockError {
    LockError::permanent(NAME, format!("unexpected reply to {what}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_errors_are_temporary_and_wrongtype_is_not() {
        let io: RedisError = std::io::Error::from(std::io::ErrorKind::ConnectionReset).into();
        assert!(classify(io).is_temporary());
        let auth: RedisError = (ErrorKind::AuthenticationFailed, "denied").into();
        assert!(!classify(auth).is_temporary());
        let ty: RedisError = (ErrorKind::UnexpectedReturnType, "x").into();
        assert!(!classify(ty).is_temporary());
    }
}
