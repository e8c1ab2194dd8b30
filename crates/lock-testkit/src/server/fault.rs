//! The fault hooks as a trait, for code generic over servers, and their inherent forwarding on
//! every server type.

use super::{ManagedProcess, ServerError};

/// The fault hooks, for code that is generic over servers (`&dyn FaultControl`).
///
/// Every server type also has the same methods as inherent methods, so calling them needs no
/// import of this trait.
pub trait FaultControl {
    /// The process behind this server.
    fn process(&self) -> &ManagedProcess;

    /// See [`ManagedProcess::kill`].
    fn kill(&self) -> Result<(), ServerError> {
        self.process().kill()
    }
    /// See [`ManagedProcess::stop`].
    fn stop(&self) -> Result<(), ServerError> {
        self.process().stop()
    }
    /// See [`ManagedProcess::restart`].
    fn restart(&self) -> Result<(), ServerError> {
        self.process().restart()
    }
    /// See [`ManagedProcess::pause`].
    fn pause(&self) -> Result<(), ServerError> {
        self.process().pause()
    }
    /// See [`ManagedProcess::resume`].
    fn resume(&self) -> Result<(), ServerError> {
        self.process().resume()
    }
    /// See [`ManagedProcess::is_running`].
    fn is_running(&self) -> bool {
        self.process().is_running()
    }
}

/// Inherent forwarding of the fault hooks (so callers need no trait import) + `FaultControl`.
#[macro_export]
macro_rules! fault_hooks {
    ($ty:ty, $field:ident) => {
        impl $ty {
            /// SIGKILL the server, reap it and wait until its port is closed.
            pub fn kill(&self) -> Result<(), $crate::server::ServerError> {
                self.$field.kill()
            }
            /// SIGTERM (clean shutdown) and wait for the exit.
            pub fn stop(&self) -> Result<(), $crate::server::ServerError> {
                self.$field.stop()
            }
            /// Start again on the same port with the same data directory; waits until serving.
            pub fn restart(&self) -> Result<(), $crate::server::ServerError> {
                self.$field.restart()
            }
            /// SIGSTOP: freeze the server (requests hang, connections stay open).
            pub fn pause(&self) -> Result<(), $crate::server::ServerError> {
                self.$field.pause()
            }
            /// SIGCONT after [`pause`](Self::pause).
            pub fn resume(&self) -> Result<(), $crate::server::ServerError> {
                self.$field.resume()
            }
            /// True while the server process exists (also while paused).
            pub fn is_running(&self) -> bool {
                self.$field.is_running()
            }
            /// The pid of the server process (after a kill: of the last one).
            pub fn pid(&self) -> u32 {
                self.$field.pid()
            }
            /// The underlying process (directory, log, startup time ...).
            pub fn process(&self) -> &$crate::server::ManagedProcess {
                &self.$field
            }
        }

        impl $crate::server::FaultControl for $ty {
            fn process(&self) -> &$crate::server::ManagedProcess {
                &self.$field
            }
        }
    };
}
