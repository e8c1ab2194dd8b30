//! A backend around another that shows each request to a hook first: the hook counts requests,
//! or fails them (a client cut off from its store); and, if asked, each answer to a second
//! hook, which can lose it (the request was applied, its answer never came).

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use lock_core::backend::{AcquireRequest, Attempt, LockBackend, Record, RecordOp, RenewItem, Subscription};
use lock_core::backend::{Admin, Notes, Notify, RaiseFence, Records, WaitQueue};
use lock_core::{Capability, FencingToken, LockInfo, OwnerToken, Result};

/// The request a [`Hooked`] backend is about to forward.
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
}

type Hook = dyn Fn(Call) -> Result<()> + Send + Sync;

/// Forwards every request to `inner` once the hook has seen it and let it through (an error
/// from the hook is the request's answer). Name, capabilities and identity are `inner`'s.
pub struct Hooked {
    inner: Arc<dyn LockBackend>,
    hook: Box<Hook>,
    answers: Option<Box<Hook>>,
}

impl Hooked {
    /// `inner` behind a hook that counts the requests of kind `call` and lets all through:
    /// the backend and its count (what the cases that bound an operation's requests need).
    pub fn counting(inner: Arc<dyn LockBackend>, call: Call) -> (Self, Arc<AtomicUsize>) {
        let count = Arc::new(AtomicUsize::new(0));
        let counted = count.clone();
        let hooked = Hooked::new(inner, move |c| {
            if c == call {
                counted.fetch_add(1, Ordering::SeqCst);
            }
            Ok(())
        });
        (hooked, count)
    }

    /// `inner` behind `hook`.
    pub fn new(
        inner: Arc<dyn LockBackend>,
        hook: impl Fn(Call) -> Result<()> + Send + Sync + 'static,
    ) -> Self {
        Hooked { inner, hook: Box::new(hook), answers: None }
    }

    /// The same, with `hook` shown every request that `inner` answered without an error: an
    /// error from it replaces the answer, as a connection lost after the store applied the
    /// request would.
    pub fn with_answers(mut self, hook: impl Fn(Call) -> Result<()> + Send + Sync + 'static) -> Self {
        self.answers = Some(Box::new(hook));
        self
    }

    /// `answer` as the caller gets it: lost if the answer hook says so.
    fn answer<T>(&self, call: Call, answer: Result<T>) -> Result<T> {
        let answer = answer?;
        match &self.answers {
            Some(hook) => hook(call).map(|()| answer),
            None => Ok(answer),
        }
    }

    /// The backend requests are forwarded to.
    pub fn inner(&self) -> &Arc<dyn LockBackend> {
        &self.inner
    }
}

impl fmt::Debug for Hooked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hooked").field("inner", &self.inner).finish_non_exhaustive()
    }
}

#[async_trait]
impl LockBackend for Hooked {
    fn name(&self) -> &'static str {
        self.inner.name()
    }
    fn capabilities(&self) -> Capability {
        self.inner.capabilities()
    }
    fn identity(&self) -> String {
        self.inner.identity()
    }
    async fn try_acquire(&self, req: &AcquireRequest<'_>) -> Result<Attempt> {
        let call = Call::TryAcquire;
        (self.hook)(call)?;
        self.answer(call, self.inner.try_acquire(req).await)
    }
    async fn release(&self, key: &str, owner: OwnerToken) -> Result<bool> {
        let call = Call::Release;
        (self.hook)(call)?;
        self.answer(call, self.inner.release(key, owner).await)
    }
    async fn renew(&self, items: &[RenewItem<'_>]) -> Result<Vec<bool>> {
        let call = Call::Renew { items: items.len() };
        (self.hook)(call)?;
        self.answer(call, self.inner.renew(items).await)
    }
    async fn inspect(&self, key: &str) -> Result<LockInfo> {
        let call = Call::Inspect;
        (self.hook)(call)?;
        self.answer(call, self.inner.inspect(key).await)
    }

    fn notify(&self) -> Option<&dyn Notify> {
        self.inner.notify().map(|_| self as &dyn Notify)
    }

    fn queue(&self) -> Option<&dyn WaitQueue> {
        self.inner.queue().map(|_| self as &dyn WaitQueue)
    }

    fn notes(&self) -> Option<&dyn Notes> {
        self.inner.notes().map(|_| self as &dyn Notes)
    }

    fn fences(&self) -> Option<&dyn RaiseFence> {
        self.inner.fences().map(|_| self as &dyn RaiseFence)
    }

    fn records(&self) -> Option<&dyn Records> {
        self.inner.records().map(|_| self as &dyn Records)
    }

    fn admin(&self) -> Option<&dyn Admin> {
        self.inner.admin().map(|_| self as &dyn Admin)
    }
}

#[async_trait]
impl Notify for Hooked {
    async fn subscribe(&self, key: &str) -> Result<Option<Subscription>> {
        let call = Call::Subscribe;
        (self.hook)(call)?;
        self.answer(call, self.inner.subscribe(key).await)
    }

    fn listening(&self, key: &str) -> bool {
        self.inner.listening(key)
    }
}

#[async_trait]
impl WaitQueue for Hooked {
    async fn leave_queue(&self, key: &str, owner: OwnerToken) -> Result<()> {
        let call = Call::LeaveQueue;
        (self.hook)(call)?;
        self.answer(call, self.inner.leave_queue(key, owner).await)
    }
}

#[async_trait]
impl Notes for Hooked {
    async fn set_note(&self, key: &str, owner: OwnerToken, note: &str) -> Result<bool> {
        let call = Call::SetNote;
        (self.hook)(call)?;
        self.answer(call, self.inner.set_note(key, owner, note).await)
    }

    async fn note(&self, key: &str) -> Result<Option<String>> {
        let call = Call::Note;
        (self.hook)(call)?;
        self.answer(call, self.inner.note(key).await)
    }
}

#[async_trait]
impl RaiseFence for Hooked {
    async fn raise_fence(&self, key: &str, owner: OwnerToken, floor: FencingToken) -> Result<bool> {
        let call = Call::RaiseFence;
        (self.hook)(call)?;
        self.answer(call, self.inner.raise_fence(key, owner, floor).await)
    }
}

#[async_trait]
impl Records for Hooked {
    async fn record(&self, key: &str, op: RecordOp<'_>) -> Result<Record> {
        let call = Call::Record;
        (self.hook)(call)?;
        self.answer(call, self.inner.record(key, op).await)
    }
}

#[async_trait]
impl Admin for Hooked {
    async fn evict(&self, key: &str, fence: FencingToken) -> Result<bool> {
        self.inner.evict(key, fence).await
    }

    async fn list(&self, prefix: &str, limit: usize) -> Result<Vec<String>> {
        self.inner.list(prefix, limit).await
    }
}
