//! Readiness: proving that the process answering on the port is ours and serving.

use std::fmt;
use std::time::Duration;

type Check = Box<dyn Fn(u32, u16) -> Result<(), String> + Send + Sync>;

/// How to prove that the server on the port is ours and serving, written by the code that
/// starts the server (each store's testing crate), so that a new store needs nothing here.
///
/// `check(pid, port)` answers `Ok(())` once the process `pid` serves on `port` and is proved to
/// be the one started (its own name, pid or directory in an answer of the server), else what it
/// saw; it is polled every `poll` until it passes or the start times out.
pub struct Probe {
    check: Check,
    poll: Duration,
}

impl Probe {
    /// `check(pid, port)`, polled every `poll`.
    pub fn new(
        poll: Duration,
        check: impl Fn(u32, u16) -> Result<(), String> + Send + Sync + 'static,
    ) -> Self {
        Probe { check: Box::new(check), poll }
    }

    pub(crate) fn poll_interval(&self) -> Duration {
        self.poll
    }

    /// `Ok(())` when ready; `Err(observation)` otherwise.
    pub(crate) fn check(&self, pid: u32, port: u16) -> Result<(), String> {
        (self.check)(pid, port)
    }
}

impl fmt::Debug for Probe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Probe").field("poll", &self.poll).finish_non_exhaustive()
    }
}
