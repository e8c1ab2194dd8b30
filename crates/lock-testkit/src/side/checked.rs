//! What the history checkers take from a store's testing side: its targets (a mode each), each
//! on a private server of its own that the checkers fault.

use crate::history::nemesis::EndSessions;
use crate::server::{FaultControl, ServerError};

/// Which faults make the server drop holds at once, without notice to the holder: under them
/// only the fence keeps the checked register consistent.
#[derive(Debug, Clone, Copy, Default)]
pub struct Revokes {
    /// A closed connection frees the lock (connection-bound locks).
    pub on_cut: bool,
    /// A killed and restarted server forgets its locks (no persistence).
    pub on_restart: bool,
    /// The server ending the clients' sessions ([`EndSessions`]) frees their locks.
    pub on_session_kill: bool,
}

/// A server the checkers fault: the process hooks, and the sessions it can end.
pub trait Faultable: FaultControl + Send + Sync {
    /// How the server ends its clients' sessions; `None`: it has no such command (the
    /// checkers blackhole the network instead).
    fn sessions(&self) -> Option<&dyn EndSessions> {
        None
    }
}

/// A private server started for one checked target, and this library's URL on it.
pub struct CheckedServer {
    /// The server, dropped (killed) when the target's runs end.
    pub server: Box<dyn Faultable>,
    /// Its client port: the checkers put a proxy of their own in front of it.
    pub port: u16,
    /// This library's URL of the target on `127.0.0.1:port`.
    pub url: String,
}

impl std::fmt::Debug for CheckedServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CheckedServer")
            .field("port", &self.port)
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

type Start = Box<dyn Fn() -> Result<CheckedServer, ServerError> + Send + Sync>;

/// One target of the history checkers: a store in one mode, on a private server of its own.
pub struct Checked {
    /// The runs' label: `redis/fair`.
    pub label: String,
    /// What the faults take away at once.
    pub revokes: Revokes,
    /// Whether the classic history checker runs it (it keeps to a mode per way of holding,
    /// for CI's time).
    pub history: bool,
    /// Whether the generative checker runs it.
    pub generative: bool,
    start: Start,
}

impl Checked {
    /// `label`'s target, whose server `start` starts.
    pub fn new(
        label: impl Into<String>,
        revokes: Revokes,
        start: impl Fn() -> Result<CheckedServer, ServerError> + Send + Sync + 'static,
    ) -> Self {
        Checked { label: label.into(), revokes, history: true, generative: true, start: Box::new(start) }
    }

    /// Left to the generative checker.
    pub fn generative_only(self) -> Self {
        Checked { history: false, ..self }
    }

    /// Left to the classic history checker.
    pub fn history_only(self) -> Self {
        Checked { generative: false, ..self }
    }

    /// Starts the target's private server.
    ///
    /// # Errors
    /// When the server cannot be started.
    pub fn start(&self) -> Result<CheckedServer, ServerError> {
        (self.start)()
    }
}

impl std::fmt::Debug for Checked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Checked")
            .field("label", &self.label)
            .field("revokes", &self.revokes)
            .field("history", &self.history)
            .field("generative", &self.generative)
            .finish_non_exhaustive()
    }
}
