//! Why a test server could not be started, controlled or queried.

use std::fmt;
use std::io;
use std::sync::Arc;
use std::time::Duration;

/// Why a test server could not be started, controlled or queried.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum ServerError {
    /// A server binary (or jar) is not installed.
    MissingBinary {
        /// The program or file that was looked for.
        binary: String,
        /// The Debian package that provides it (`apt-get install <debian_package>`).
        debian_package: &'static str,
    },
    /// An I/O operation failed (spawning a process, creating a directory, writing a config ...).
    Io {
        /// What was being done.
        context: String,
        /// The underlying error.
        source: Arc<io::Error>,
    },
    /// The server process exited while we were waiting for it to become ready.
    Exited {
        /// Which server.
        what: String,
        /// Its exit status.
        status: String,
        /// The last lines of its log.
        log_tail: String,
    },
    /// The server did not become ready in time.
    NotReady {
        /// Which server, and the last observation of the readiness probe.
        what: String,
        /// How long we waited.
        waited: Duration,
        /// The last lines of its log.
        log_tail: String,
    },
    /// A port was still accepting connections after the server owning it had been killed.
    PortStillOpen {
        /// The port.
        port: u16,
        /// How long we waited for it to close.
        waited: Duration,
    },
    /// The operation needs a running server, but it is not running.
    NotRunning {
        /// Which server.
        what: String,
    },
    /// A helper command (`mariadb-install-db`, `cp`, the `mariadb` CLI ...) failed.
    Command {
        /// What was run.
        what: String,
        /// Its exit status and output.
        detail: String,
    },
    /// A server answered something unexpected on its wire protocol.
    Protocol {
        /// Which server / request.
        what: String,
        /// What was wrong.
        detail: String,
    },
}

impl ServerError {
    /// True if the error means "not installed here" (so a test may be skipped unless
    /// [`require_servers`](super::require_servers) is set).
    pub fn is_missing_binary(&self) -> bool {
        matches!(self, ServerError::MissingBinary { .. })
    }

    /// An I/O failure, with what was being done.
    pub fn io(context: impl Into<String>, source: io::Error) -> Self {
        ServerError::Io { context: context.into(), source: Arc::new(source) }
    }
}

impl fmt::Display for ServerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServerError::MissingBinary { binary, debian_package } => write!(
                f,
                "`{binary}` not found; install the Debian package `{debian_package}` \
                 (apt-get install {debian_package})"
            ),
            ServerError::Io { context, source } => write!(f, "{context}: {source}"),
            ServerError::Exited { what, status, log_tail } => {
                write!(f, "{what} exited during startup ({status}); log tail:\n{log_tail}")
            }
            ServerError::NotReady { what, waited, log_tail } => {
                write!(f, "{what} not ready after {waited:?}; log tail:\n{log_tail}")
            }
            ServerError::PortStillOpen { port, waited } => {
                write!(f, "port {port} still accepts connections {waited:?} after its server died")
            }
            ServerError::NotRunning { what } => write!(f, "{what} is not running"),
            ServerError::Command { what, detail } => write!(f, "`{what}` failed: {detail}"),
            ServerError::Protocol { what, detail } => write!(f, "{what}: {detail}"),
        }
    }
}

impl std::error::Error for ServerError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ServerError::Io { source, .. } => Some(source.as_ref()),
            _ => None,
        }
    }
}
