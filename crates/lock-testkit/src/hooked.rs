//! A backend around another that shows each request to a hook first: the hook counts requests,
//! or fails them (a client cut off from its store); and, if asked, each answer to a second
//! hook, which can lose it (the request was applied, its answer never came). It is lock-core's
//! fault wrapper with hooks and no fault armed, so that the trait is forwarded in one place;
//! requests are named by its [`Op`] (a renewal's size is `Faults::before_each`'s).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use lock_core::Result;
use lock_core::backend::LockBackend;
use lock_core::faults::{FaultyBackend, Op};

/// `inner` behind `hook`: every request is shown to it first, and an error from it is the
/// request's answer. Name, capabilities and identity are `inner`'s.
pub fn hooked(
    inner: Arc<dyn LockBackend>,
    hook: impl Fn(Op) -> Result<()> + Send + Sync + 'static,
) -> FaultyBackend {
    let (backend, faults) = FaultyBackend::wrap(inner);
    faults.before_each(move |op, _| hook(op));
    backend
}

/// `inner` with `hook` shown every request that it answered without an error: an error from
/// it replaces the answer, as a connection lost after the store applied the request would.
pub fn answers_hooked(
    inner: Arc<dyn LockBackend>,
    hook: impl Fn(Op) -> Result<()> + Send + Sync + 'static,
) -> FaultyBackend {
    let (backend, faults) = FaultyBackend::wrap(inner);
    faults.after_each(move |op, _| hook(op));
    backend
}

/// `inner` behind a hook that counts the requests of kind `call` and lets all through: the
/// backend and its count (what the cases that bound an operation's requests need).
pub fn counting(inner: Arc<dyn LockBackend>, call: Op) -> (FaultyBackend, Arc<AtomicUsize>) {
    let count = Arc::new(AtomicUsize::new(0));
    let counted = count.clone();
    let backend = hooked(inner, move |c| {
        if c == call {
            counted.fetch_add(1, Ordering::SeqCst);
        }
        Ok(())
    });
    (backend, count)
}
