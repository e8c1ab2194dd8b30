//! NATS errors as [`LockError`]s, decided where the driver error is born.

use std::future::Future;
use std::time::Duration;

use async_nats::ConnectErrorKind;
use async_nats::jetstream::context::PublishErrorKind;
use lock_core::LockError;

pub(crate) const NAME: &str = "nats";

/// A driver error: `temporary` for what a retry may fix (a lost connection, a timeout, a
/// server restarting its JetStream), else permanent.
pub(crate) fn driver<E>(e: E, temporary: bool) -> LockError
where
    E: std::error::Error + Send + Sync + 'static,
{
    if temporary { LockError::temporary(NAME, e) } else { LockError::permanent(NAME, e) }
}

/// Connecting: bad credentials or a user the server refuses are `PermissionDenied`; a TLS
/// handshake refused or a bad address are permanent; a server not answering is temporary.
pub(crate) fn connect(e: async_nats::ConnectError) -> LockError {
    match e.kind() {
        ConnectErrorKind::Authentication | ConnectErrorKind::AuthorizationViolation => {
            LockError::permission_denied(NAME, e)
        }
        ConnectErrorKind::Tls | ConnectErrorKind::ServerParse => LockError::permanent(NAME, e),
        _ if lock_core::is_tls_refusal(&e) => LockError::permanent(NAME, e),
        _ => LockError::temporary(NAME, e),
    }
}

/// What a conditional write was answered.
#[derive(Debug)]
pub(crate) enum Refused {
    /// The key's last revision was not the one expected (someone else's value, or none).
    Conflict,
    /// Any other failure.
    Failed(LockError),
}

impl From<LockError> for Refused {
    fn from(e: LockError) -> Self {
        Refused::Failed(e)
    }
}

/// A publish to the bucket: a wrong last sequence is the compare-and-set's refusal; a
/// timeout, a broken connection or "no responders" (the stream not serving: a server
/// restarting its JetStream) are temporary; the rest is permanent.
pub(crate) fn publish(e: async_nats::jetstream::context::PublishError) -> Refused {
    match e.kind() {
        PublishErrorKind::WrongLastSequence => Refused::Conflict,
        PublishErrorKind::TimedOut
        | PublishErrorKind::BrokenPipe
        | PublishErrorKind::MaxAckPending
        | PublishErrorKind::StreamNotFound => Refused::Failed(LockError::temporary(NAME, e)),
        _ if permission(&e) => Refused::Failed(LockError::permission_denied(NAME, e)),
        _ => Refused::Failed(LockError::permanent(NAME, e)),
    }
}

/// A JetStream API error that says the user may not do this.
pub(crate) fn permission(e: &dyn std::error::Error) -> bool {
    let msg = e.to_string().to_ascii_lowercase();
    msg.contains("permission") || msg.contains("authorization")
}

/// A temporary error with a message of our own.
pub(crate) fn temporary(msg: &'static str) -> LockError {
    LockError::temporary(NAME, msg)
}

/// `request` bounded by `timeout`: an unanswered request is a temporary error (the client's
/// own timeouts cover the acknowledgement of a publish, not a publish stuck while the client
/// reconnects).
pub(crate) async fn bounded<T>(
    timeout: Duration,
    request: impl Future<Output = Result<T, LockError>>,
) -> Result<T, LockError> {
    tokio::time::timeout(timeout, request).await.unwrap_or_else(|_| Err(temporary("nats request timed out")))
}
