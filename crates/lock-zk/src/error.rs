//! ZooKeeper errors as [`LockError`]s.

use lock_core::LockError;
use zookeeper_client as zk;

pub(crate) const NAME: &str = "zk";

/// Map a driver error: connection trouble and a dead session are temporary (the next attempt
/// reconnects, with a new session if needed); ACL, auth and argument errors are permanent.
pub(crate) fn lock_error(e: zk::Error) -> LockError {
    if matches!(e, zk::Error::NoAuth | zk::Error::AuthFailed) {
        LockError::permission_denied(NAME, e)
    } else if is_temporary(&e) {
        LockError::temporary(NAME, e)
    } else {
        LockError::permanent(NAME, e)
    }
}

pub(crate) fn is_temporary(e: &zk::Error) -> bool {
    matches!(
        e,
        zk::Error::ConnectionLoss
            | zk::Error::Timeout
            | zk::Error::Custom(_)
            | zk::Error::SessionExpired
            | zk::Error::SessionMoved
            | zk::Error::Throttled
            | zk::Error::NoHosts
            | zk::Error::ClientClosed
    )
}

/// The request may or may not have been applied (its reply was lost).
pub(crate) fn outcome_unknown(e: &zk::Error) -> bool {
    matches!(e, zk::Error::ConnectionLoss | zk::Error::Timeout | zk::Error::Custom(_))
}

/// The session is gone: its ephemeral nodes are gone too, and nothing more can be done with it.
pub(crate) fn session_ended(e: &zk::Error) -> bool {
    matches!(e, zk::Error::SessionExpired | zk::Error::ClientClosed | zk::Error::AuthFailed)
}

/// A temporary error with a message of our own.
pub(crate) fn temporary(msg: &'static str) -> LockError {
    LockError::temporary(NAME, msg)
}
