//! Replica acknowledgement: `WAIT numreplicas timeout` after each grant, what Redisson offers
//! instead of Redlock against the asynchronous replication of a primary.

use std::fmt;
use std::time::Duration;

/// Default of how long a grant waits for its replicas' acknowledgement
/// ([`RedisLockBuilder::replica_ack`](crate::RedisLockBuilder::replica_ack), URL option
/// `replica_ack_timeout`).
pub const DEFAULT_REPLICA_ACK_TIMEOUT: Duration = Duration::from_millis(500);

/// `replicas` replicas must acknowledge each grant within `timeout`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReplicaAck {
    pub(crate) replicas: u32,
    pub(crate) timeout: Duration,
}

/// The source of the temporary [`LockError`](lock_core::LockError) an acquisition returns when
/// fewer replicas than asked acknowledged its grant in time. The grant was released before
/// the error was returned (as far as the primary answered; else its lease frees it).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReplicasNotAcknowledged {
    /// Replicas asked for.
    pub wanted: u32,
    /// Replicas that acknowledged the grant within the timeout.
    pub acknowledged: u32,
    /// How long the grant waited for them.
    pub timeout: Duration,
}

impl fmt::Display for ReplicasNotAcknowledged {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} of {} replicas acknowledged the grant within {:?}; it was released",
            self.acknowledged, self.wanted, self.timeout
        )
    }
}

impl std::error::Error for ReplicasNotAcknowledged {}
