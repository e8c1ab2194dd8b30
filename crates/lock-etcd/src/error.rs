//! etcd errors as [`LockError`]s, decided where the driver error is born.

use std::future::Future;
use std::time::Duration;

use etcd_client::Error;
use lock_core::LockError;
use tonic::{Code, Status};

pub(crate) const NAME: &str = "etcd";

/// Map a driver error: transport trouble, timeouts and a cluster without a leader are
/// temporary (the next attempt goes to another endpoint or waits out an election); a missing
/// permission is `PermissionDenied`; bad credentials, arguments and a TLS handshake refused
/// (an untrusted certificate) are permanent.
pub(crate) fn lock_error(e: Error) -> LockError {
    match &e {
        Error::GRpcStatus(s) if s.code() == Code::PermissionDenied => LockError::permission_denied(NAME, e),
        // A wrong user or password answers InvalidArgument ("authentication failed").
        Error::GRpcStatus(s) if s.message().contains("authentication failed") => {
            LockError::permission_denied(NAME, e)
        }
        _ if is_temporary(&e) => LockError::temporary(NAME, e),
        _ => LockError::permanent(NAME, e),
    }
}

pub(crate) fn is_temporary(e: &Error) -> bool {
    // An untrusted certificate comes as Unavailable, but no retry will fix it.
    if lock_core::is_tls_refusal(e) {
        return false;
    }
    match e {
        Error::GRpcStatus(s) => {
            matches!(
                s.code(),
                Code::Unavailable
                | Code::DeadlineExceeded
                | Code::Aborted
                | Code::Cancelled
                | Code::ResourceExhausted
                | Code::Unknown
                // An expired auth token; the client re-authenticates on the next call.
                | Code::Unauthenticated
            ) || lease_gone(e)
        }
        Error::TransportError(_)
        | Error::IoError(_)
        | Error::WatchError(_)
        | Error::LeaseKeepAliveError(_)
        | Error::EndpointError(_)
        | Error::Internal(_) => true,
        _ => false,
    }
}

/// The lease is not (or no longer) known to the cluster: revoked or expired, and every key
/// under it deleted.
pub(crate) fn lease_gone(e: &Error) -> bool {
    match e {
        Error::GRpcStatus(s) => s.code() == Code::NotFound && s.message().contains("lease not found"),
        Error::LeaseKeepAliveError(m) => m.contains("lease not found"),
        _ => false,
    }
}

/// A temporary error with a message of our own.
pub(crate) fn temporary(msg: &'static str) -> LockError {
    LockError::temporary(NAME, msg)
}

/// `request` bounded by `timeout`: an unanswered request is a temporary error. (Not the
/// client's own per-request timeout: gRPC sends it as the `grpc-timeout` of every call, and the
/// server would end keep-alive and watch streams when it runs out.)
pub(crate) async fn bounded<T>(
    timeout: Duration,
    request: impl Future<Output = Result<T, Error>>,
) -> Result<T, Error> {
    tokio::time::timeout(timeout, request)
        .await
        .unwrap_or_else(|_| Err(Error::GRpcStatus(Status::deadline_exceeded("etcd request timed out"))))
}
