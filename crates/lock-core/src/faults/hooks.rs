//! Hooks shown every call before it goes on to the store, and every answer before the caller
//! gets it: what a test that counts calls, or fails them by a rule of its own, needs without
//! a forwarding backend of its own (one forwarder, so that a new method is forwarded once).

use std::fmt;
use std::sync::Arc;

use super::{Faults, Op};
use crate::Result;

/// A hook: the call, and how many holds it carries (a renewal's items; 1 for every other call).
#[derive(Clone)]
pub(super) struct Hook(Arc<dyn Fn(Op, usize) -> Result<()> + Send + Sync>);

impl Hook {
    pub(super) fn call(&self, op: Op, items: usize) -> Result<()> {
        (self.0)(op, items)
    }
}

impl fmt::Debug for Hook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Hook")
    }
}

/// The hooks of one wrapper.
#[derive(Clone, Debug, Default)]
pub(super) struct Hooks {
    pub(super) before: Option<Hook>,
    pub(super) after: Option<Hook>,
}

/// What one call was let through with: whether its answer is to be lost, and its size for the
/// answer's hook.
#[derive(Clone, Copy, Debug)]
pub(super) struct Pass {
    pub(super) lose: bool,
    pub(super) items: usize,
}

impl Faults {
    /// Show every call to `hook` once the armed waits and failures have let it through, with
    /// how many holds it carries (a renewal's items, 1 for any other call): an error from it is
    /// the call's answer, and the call never reaches the store. It stays until replaced
    /// ([`heal`](Self::heal) clears faults, not hooks).
    pub fn before_each(&self, hook: impl Fn(Op, usize) -> Result<()> + Send + Sync + 'static) {
        self.shared.state.lock().hooks.before = Some(Hook(Arc::new(hook)));
    }

    /// Show `hook` every call that the store answered without an error: an error from it
    /// replaces the answer, as a connection lost after the store applied the request would.
    pub fn after_each(&self, hook: impl Fn(Op, usize) -> Result<()> + Send + Sync + 'static) {
        self.shared.state.lock().hooks.after = Some(Hook(Arc::new(hook)));
    }
}
