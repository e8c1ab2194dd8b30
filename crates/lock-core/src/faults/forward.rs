//! The wrapper's [`LockBackend`]: every call forwarded, through the armed faults, and every
//! capability the wrapped store hands out handed out again as the wrapper's own, so that its
//! calls pass the faults too (`tests::probe::every_method_is_forwarded`).

use async_trait::async_trait;

use super::{FaultyBackend, Op};
use crate::backend::{AcquireRequest, Attempt, LockBackend, Record, RecordOp, RenewItem, Subscription};
use crate::backend::{Admin, Notes, Notify, RaiseFence, Records, WaitQueue};
use crate::{Capability, FencingToken, LockInfo, OwnerToken, Result};

#[async_trait]
impl LockBackend for FaultyBackend {
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
        let pass = self.faults.gate(Op::TryAcquire).await?;
        let attempt = self.inner.try_acquire(req).await?;
        if let Attempt::Acquired(_) = attempt {
            // Held in the store even when its answer is lost below.
            self.faults.granted(req.key, req.owner);
        }
        self.faults.answer(Op::TryAcquire, pass, attempt)
    }

    async fn release(&self, key: &str, owner: OwnerToken) -> Result<bool> {
        let pass = self.faults.gate(Op::Release).await?;
        if self.faults.is_lost(key, owner, true) {
            return self.faults.answer(Op::Release, pass, false);
        }
        let released = self.inner.release(key, owner).await?;
        self.faults.answered(key, owner, released, true);
        self.faults.answer(Op::Release, pass, released)
    }

    async fn renew(&self, items: &[RenewItem<'_>]) -> Result<Vec<bool>> {
        let pass = self.faults.gate_n(Op::Renew, items.len()).await?;
        let lost: Vec<bool> = items.iter().map(|i| self.faults.is_lost(i.key, i.owner, false)).collect();
        let live: Vec<RenewItem<'_>> =
            items.iter().zip(&lost).filter(|&(_, &lost)| !lost).map(|(i, _)| *i).collect();
        let renewed = match live.is_empty() {
            true => Vec::new(),
            false => self.inner.renew(&live).await?,
        };
        for (item, &held) in live.iter().zip(&renewed) {
            self.faults.answered(item.key, item.owner, held, false);
        }
        let answer = match live.len() == items.len() {
            // Nothing forgotten: the store's answer as it is.
            true => renewed,
            false => {
                let mut renewed = renewed.into_iter();
                lost.iter().map(|&lost| !lost && renewed.next().unwrap_or(false)).collect()
            }
        };
        self.faults.answer(Op::Renew, pass, answer)
    }

    async fn inspect(&self, key: &str) -> Result<LockInfo> {
        let pass = self.faults.gate(Op::Inspect).await?;
        let info = self.inner.inspect(key).await?;
        self.faults.answer(Op::Inspect, pass, info)
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
impl Notify for FaultyBackend {
    async fn subscribe(&self, key: &str) -> Result<Option<Subscription>> {
        let pass = self.faults.gate(Op::Subscribe).await?;
        let sub = self.inner.subscribe(key).await?;
        // A lost answer drops the subscription, which unsubscribes as the caller's drop would.
        self.faults.answer(Op::Subscribe, pass, sub)
    }

    fn listening(&self, key: &str) -> bool {
        self.inner.listening(key)
    }
}

#[async_trait]
impl WaitQueue for FaultyBackend {
    async fn leave_queue(&self, key: &str, owner: OwnerToken) -> Result<()> {
        let pass = self.faults.gate(Op::LeaveQueue).await?;
        self.inner.leave_queue(key, owner).await?;
        self.faults.answer(Op::LeaveQueue, pass, ())
    }
}

#[async_trait]
impl Notes for FaultyBackend {
    async fn set_note(&self, key: &str, owner: OwnerToken, note: &str) -> Result<bool> {
        let pass = self.faults.gate(Op::SetNote).await?;
        let stored = !self.faults.is_lost(key, owner, false) && self.inner.set_note(key, owner, note).await?;
        self.faults.answer(Op::SetNote, pass, stored)
    }

    async fn note(&self, key: &str) -> Result<Option<String>> {
        let pass = self.faults.gate(Op::Note).await?;
        let note = self.inner.note(key).await?;
        self.faults.answer(Op::Note, pass, note)
    }
}

#[async_trait]
impl RaiseFence for FaultyBackend {
    async fn raise_fence(&self, key: &str, owner: OwnerToken, floor: FencingToken) -> Result<bool> {
        let pass = self.faults.gate(Op::RaiseFence).await?;
        let raised =
            !self.faults.is_lost(key, owner, false) && self.inner.raise_fence(key, owner, floor).await?;
        self.faults.answer(Op::RaiseFence, pass, raised)
    }
}

#[async_trait]
impl Records for FaultyBackend {
    async fn record(&self, key: &str, op: RecordOp<'_>) -> Result<Record> {
        let pass = self.faults.gate(Op::Record).await?;
        let record = self.inner.record(key, op).await?;
        self.faults.answer(Op::Record, pass, record)
    }
}

#[async_trait]
impl Admin for FaultyBackend {
    async fn list(&self, prefix: &str, limit: usize) -> Result<Vec<String>> {
        let pass = self.faults.gate(Op::List).await?;
        let keys = self.inner.list(prefix, limit).await?;
        self.faults.answer(Op::List, pass, keys)
    }

    async fn evict(&self, key: &str, fence: FencingToken) -> Result<bool> {
        let pass = self.faults.gate(Op::Evict).await?;
        let evicted = self.inner.evict(key, fence).await?;
        self.faults.answer(Op::Evict, pass, evicted)
    }
}
