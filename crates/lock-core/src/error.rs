//! The one error type of the library.

use std::time::Duration;

/// Boxed error source from a backend driver.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Everything that can go wrong when locking.
///
/// Decide retryability with [`LockError::is_temporary`], never by matching message text.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// The key is empty, too long or contains bytes the library refuses.
    #[error("invalid lock key: {reason}")]
    InvalidKey {
        /// Why the key was refused.
        reason: &'static str,
        /// Length of the refused key in bytes.
        len: usize,
    },
    /// A lease (TTL) outside [`MIN_LEASE`](crate::MIN_LEASE)..=[`MAX_LEASE`](crate::MAX_LEASE).
    #[error("invalid lease {lease:?}: {reason}")]
    InvalidLease {
        /// The refused lease.
        lease: Duration,
        /// Why it was refused.
        reason: &'static str,
    },
    /// A wait longer than [`MAX_WAIT`](crate::MAX_WAIT).
    #[error("invalid wait {wait:?}: {reason}")]
    InvalidWait {
        /// The refused wait.
        wait: Duration,
        /// Why it was refused.
        reason: &'static str,
    },
    /// A configuration value (URL, option, table name, ...) is unusable.
    #[error("invalid configuration: {reason}")]
    InvalidConfig {
        /// What is wrong, with secrets redacted.
        reason: String,
    },
    /// The lock stayed held by someone else until the caller's deadline.
    #[error("timed out after {waited:?} waiting for lock {key:?}")]
    Timeout {
        /// The contended key.
        key: String,
        /// How long the caller waited.
        waited: Duration,
    },
    /// The caller's token does not own the lock (foreign token, already released, or expired).
    #[error("lock {key:?} is not held by this owner")]
    NotHeld {
        /// The key.
        key: String,
    },
    /// The lease was lost while held: the critical section may not have been exclusive.
    #[error("lease on lock {key:?} was lost")]
    LeaseLost {
        /// The key.
        key: String,
    },
    /// The caller already holds a side of the read-write lock `key` that the side it asks for
    /// would wait on (a read to be upgraded to a write, or a write asked to read): it would
    /// wait for itself, forever without a deadline. Release the hold first.
    #[error("would wait for itself on read-write lock {key:?}: {reason}")]
    WouldDeadlock {
        /// The read-write lock's name.
        key: String,
        /// What the caller holds and asked for.
        reason: &'static str,
    },
    /// The semaphore `name` is stored on the server with `stored` permits, and this handle was
    /// built with `asked`: every process must agree on the count. Build the handle with the
    /// stored count, or change the count for everyone with
    /// [`Semaphore::resize`](crate::Semaphore::resize).
    #[error("semaphore {name:?} has {stored} permits on the server, not {asked} as this handle says")]
    PermitsMismatch {
        /// The semaphore's name.
        name: String,
        /// The count stored with the semaphore.
        stored: u64,
        /// The count this handle was built with.
        asked: u32,
    },
    /// The backend cannot do what was asked.
    #[error("backend {backend} does not support {what}")]
    Unsupported {
        /// Backend name.
        backend: &'static str,
        /// The missing capability.
        what: &'static str,
    },
    /// The server refused the credentials, or this user may not do what the lock needs (an
    /// authentication failure, a missing ACL permission or grant). Retrying cannot help.
    #[error("{backend} refused the credentials or the permission: {source}")]
    PermissionDenied {
        /// Backend name.
        backend: &'static str,
        /// The driver's error.
        #[source]
        source: BoxError,
    },
    /// A URL scheme needs a cargo feature that this build does not have.
    #[error("url scheme {scheme:?} needs the cargo feature {feature:?}")]
    FeatureNotEnabled {
        /// The URL scheme.
        scheme: String,
        /// The feature to enable.
        feature: &'static str,
    },
    /// The backend failed; `temporary` tells whether retrying can help. The message carries the
    /// driver's (the server's words are what a misconfiguration needs); it stays the `source`
    /// too, for callers that downcast it.
    #[error("{backend} backend error ({}): {source}", if *.temporary { "temporary" } else { "permanent" })]
    Backend {
        /// Backend name.
        backend: &'static str,
        /// Whether a retry may succeed (connection loss, timeouts, lock-wait timeouts).
        temporary: bool,
        /// The driver's error.
        #[source]
        source: BoxError,
    },
}

impl LockError {
    /// Whether retrying the same operation may succeed.
    pub fn is_temporary(&self) -> bool {
        matches!(self, LockError::Timeout { .. } | LockError::Backend { temporary: true, .. })
    }

    /// A temporary backend error.
    pub fn temporary(backend: &'static str, source: impl Into<BoxError>) -> Self {
        LockError::Backend { backend, temporary: true, source: source.into() }
    }

    /// A permanent backend error.
    pub fn permanent(backend: &'static str, source: impl Into<BoxError>) -> Self {
        LockError::Backend { backend, temporary: false, source: source.into() }
    }

    /// The server refused the credentials or a permission.
    pub fn permission_denied(backend: &'static str, source: impl Into<BoxError>) -> Self {
        LockError::PermissionDenied { backend, source: source.into() }
    }
}

/// Whether `e` (or one of its sources) is a TLS handshake refusal: a certificate the client
/// does not trust, a name mismatch, a protocol error. Waiting does not fix those, so backends
/// report them as permanent rather than as a connection problem.
pub fn is_tls_refusal(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(x) = cur {
        let text = x.to_string();
        if text.contains("invalid peer certificate") || text.contains("InvalidCertificate") {
            return true;
        }
        if let Some(io) = x.downcast_ref::<std::io::Error>()
            && io.kind() == std::io::ErrorKind::InvalidData
            && io
                .get_ref()
                .is_some_and(|inner| inner.to_string().to_ascii_lowercase().contains("certificate"))
        {
            return true;
        }
        cur = x.source();
    }
    false
}

/// Result alias.
pub type Result<T, E = LockError> = std::result::Result<T, E>;
