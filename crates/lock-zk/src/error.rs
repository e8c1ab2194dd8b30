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

/// The session of a client given to
/// [`ZkLockBuilder::client`](crate::ZkLockBuilder::client) has ended (expired, closed or
/// refused its credentials): the client is dead, and a lock built on it cannot open another, so
/// every acquisition fails with a permanent [`LockError::Backend`] carrying this as its source
/// (downcast it to tell). Build a new lock on a new client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionEnded {
    /// The client's terminal state.
    pub state: zk::SessionState,
}

impl std::fmt::Display for SessionEnded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the session of the zookeeper client given to the lock has ended ({:?}); locks on it cannot \
             reconnect: build the lock on a new client",
            self.state
        )
    }
}

impl std::error::Error for SessionEnded {}
