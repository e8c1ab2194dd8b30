//! A backend around another that shows each request to a hook first: the hook counts requests,
//! or fails them (a client cut off from its store); and, if asked, each answer to a second
//! hook, which can lose it (the request was applied, its answer never came). It is lock-core's
//! fault wrapper with hooks and no fault armed, so that the trait is forwarded in one place.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use lock_core::Result;
use lock_core::backend::LockBackend;
use lock_core::faults::{FaultyBackend, Op};

/// The request a hooked backend is about to forward.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(missing_docs)] // the `LockBackend` methods of the same names
pub enum Call {
    TryAcquire,
    Release,
    /// A renewal of `items` holds.
    Renew {
        items: usize,
    },
    Inspect,
    LeaveQueue,
    Subscribe,
    SetNote,
    Note,
    RaiseFence,
    Record,
    List,
    Evict,
    /// A call added to the trait after these.
    Other,
}

impl Call {
    fn of(op: Op, items: usize) -> Call {
        match op {
            Op::TryAcquire => Call::TryAcquire,
            Op::Release => Call::Release,
            Op::Renew => Call::Renew { items },
            Op::Inspect => Call::Inspect,
            Op::LeaveQueue => Call::LeaveQueue,
            Op::Subscribe => Call::Subscribe,
            Op::SetNote => Call::SetNote,
            Op::Note => Call::Note,
            Op::RaiseFence => Call::RaiseFence,
            Op::Record => Call::Record,
            Op::List => Call::List,
            Op::Evict => Call::Evict,
            _ => Call::Other,
        }
    }
}

/// `inner` behind `hook`: every request is shown to it first, and an error from it is the
/// request's answer. Name, capabilities and identity are `inner`'s.
pub fn hooked(
    inner: Arc<dyn LockBackend>,
    hook: impl Fn(Call) -> Result<()> + Send + Sync + 'static,
) -> FaultyBackend {
    let (backend, faults) = FaultyBackend::wrap(inner);
    faults.before_each(move |op, items| hook(Call::of(op, items)));
    backend
}

/// `inner` with `hook` shown every request that it answered without an error: an error from
/// it replaces the answer, as a connection lost after the store applied the request would.
pub fn answers_hooked(
    inner: Arc<dyn LockBackend>,
    hook: impl Fn(Call) -> Result<()> + Send + Sync + 'static,
) -> FaultyBackend {
    let (backend, faults) = FaultyBackend::wrap(inner);
    faults.after_each(move |op, items| hook(Call::of(op, items)));
    backend
}

/// `inner` behind a hook that counts the requests of kind `call` and lets all through: the
/// backend and its count (what the cases that bound an operation's requests need).
pub fn counting(inner: Arc<dyn LockBackend>, call: Call) -> (FaultyBackend, Arc<AtomicUsize>) {
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
