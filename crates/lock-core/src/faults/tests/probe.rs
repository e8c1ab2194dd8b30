//! The forwarding checks, against a store that hands out every capability and whose every
//! answer differs from what a store without it answers.

use std::sync::Arc;

use async_trait::async_trait;

use super::{LEASE, request};
use crate::backend::{
    AcquireRequest, Attempt, Grant, LockBackend, Mutex, NotifyHub, Record, RecordOp, RenewItem, Subscription,
};
use crate::backend::{Admin, Notes, Notify, RaiseFence, Records, WaitQueue};
use crate::faults::FaultyBackend;
use crate::{Capability, FencingToken, LeaseSignal, LockInfo, OwnerToken, Result};

/// A store whose every method answers something no default body answers, and notes the call.
#[derive(Debug, Default)]
struct Probe {
    calls: Mutex<Vec<&'static str>>,
    hub: NotifyHub,
}

impl Probe {
    fn call(&self, name: &'static str) {
        self.calls.lock().push(name);
    }
}

#[async_trait]
impl LockBackend for Probe {
    fn name(&self) -> &'static str {
        "probe"
    }
    fn capabilities(&self) -> Capability {
        Capability::NONE
    }
    fn identity(&self) -> String {
        "probe://one".to_owned()
    }
    async fn try_acquire(&self, _: &AcquireRequest<'_>) -> Result<Attempt> {
        self.call("try_acquire");
        Ok(Attempt::Acquired(Grant { fence: FencingToken(7), lease: None, slot: Some(3) }))
    }
    async fn release(&self, _: &str, _: OwnerToken) -> Result<bool> {
        self.call("release");
        Ok(true)
    }
    async fn renew(&self, items: &[RenewItem<'_>]) -> Result<Vec<bool>> {
        self.call("renew");
        Ok(vec![true; items.len()])
    }
    async fn inspect(&self, _: &str) -> Result<LockInfo> {
        self.call("inspect");
        Ok(LockInfo { waiters: Some(5), ..LockInfo::held() })
    }

    crate::hand_out!(notify, queue, notes, fences, records, admin);
}

#[async_trait]
impl Notify for Probe {
    async fn subscribe(&self, key: &str) -> Result<Option<Subscription>> {
        self.call("subscribe");
        Ok(Some(self.hub.subscribe(key).0))
    }

    fn listening(&self, _: &str) -> bool {
        self.call("listening");
        true
    }
}

#[async_trait]
impl WaitQueue for Probe {
    async fn leave_queue(&self, _: &str, _: OwnerToken) -> Result<()> {
        self.call("leave_queue");
        Ok(())
    }
}

#[async_trait]
impl Notes for Probe {
    async fn set_note(&self, _: &str, _: OwnerToken, _: &str) -> Result<bool> {
        self.call("set_note");
        Ok(true)
    }

    async fn note(&self, _: &str) -> Result<Option<String>> {
        self.call("note");
        Ok(Some("probe note".to_owned()))
    }
}

#[async_trait]
impl RaiseFence for Probe {
    async fn raise_fence(&self, _: &str, _: OwnerToken, _: FencingToken) -> Result<bool> {
        self.call("raise_fence");
        Ok(true)
    }
}

#[async_trait]
impl Records for Probe {
    async fn record(&self, _: &str, _: RecordOp<'_>) -> Result<Record> {
        self.call("record");
        Ok(Record { value: Some(11), marks: 2 })
    }
}

#[async_trait]
impl Admin for Probe {
    async fn list(&self, _: &str, _: usize) -> Result<Vec<String>> {
        self.call("list");
        Ok(vec!["probe-key".to_owned()])
    }

    async fn evict(&self, _: &str, _: FencingToken) -> Result<bool> {
        self.call("evict");
        Ok(true)
    }
}

/// Every method answers the wrapped store's answer and reaches it once: a method left to the
/// trait's default body answers otherwise (unsupported, `None`, `false`) and is not noted.
#[tokio::test]
async fn every_method_is_forwarded() {
    let probe = Arc::new(Probe::default());
    let (b, _faults) = FaultyBackend::wrap(probe.clone());
    // Through the accessors, as the core calls them: each capability handed out again.
    let b: &dyn LockBackend = &b;
    let (owner, signal) = (OwnerToken::random(), LeaseSignal::new());
    assert_eq!(b.name(), "probe");
    assert_eq!(b.capabilities(), probe.capabilities());
    assert_eq!(b.identity(), "probe://one");
    let granted = Attempt::Acquired(Grant { fence: FencingToken(7), lease: None, slot: Some(3) });
    assert_eq!(b.try_acquire(&request("k", owner, &signal)).await.expect("acquire"), granted);
    assert!(b.release("k", owner).await.expect("release"));
    let item = RenewItem { key: "k", owner, lease: LEASE };
    assert_eq!(b.renew(&[item, item]).await.expect("renew"), vec![true, true]);
    assert_eq!(b.inspect("k").await.expect("inspect").waiters, Some(5));
    b.leave_queue("k", owner).await.expect("leave");
    assert!(b.subscribe("k").await.expect("subscribe").is_some());
    assert!(b.listening("k"));
    assert!(b.set_note("k", owner, "n").await.expect("set note"));
    assert_eq!(b.note("k").await.expect("note").as_deref(), Some("probe note"));
    assert!(b.raise_fence("k", owner, FencingToken(9)).await.expect("raise"));
    assert_eq!(b.list("", 10).await.expect("list"), ["probe-key"]);
    assert!(b.evict("k", FencingToken(7)).await.expect("evict"));
    assert_eq!(b.record("k", RecordOp::Get).await.expect("record"), Record { value: Some(11), marks: 2 });
    let calls = probe.calls.lock().clone();
    let every = [
        "try_acquire",
        "release",
        "renew",
        "inspect",
        "leave_queue",
        "subscribe",
        "listening",
        "set_note",
        "note",
        "raise_fence",
        "list",
        "evict",
        "record",
    ];
    assert_eq!(calls, every);
}

/// A store whose renewal confirms a session, not each key (it answers every item `true`):
/// a forgotten hold still answers "not held", as the store that forgot it would.
#[tokio::test]
async fn a_forgotten_hold_answers_not_held_whatever_the_store_says() {
    let probe = Arc::new(Probe::default());
    let (b, faults) = FaultyBackend::wrap(probe.clone());
    let (owner, signal) = (OwnerToken::random(), LeaseSignal::new());
    b.try_acquire(&request("k", owner, &signal)).await.expect("acquire");
    let live = OwnerToken::random();
    b.try_acquire(&request("live", live, &signal)).await.expect("acquire");
    assert_eq!(faults.lose("k").await.expect("lose"), 1);
    let items =
        [RenewItem { key: "k", owner, lease: LEASE }, RenewItem { key: "live", owner: live, lease: LEASE }];
    assert_eq!(b.renew(&items).await.expect("renew"), [false, true]);
    assert!(!b.set_note("k", owner, "n").await.expect("note"));
    assert!(!b.raise_fence("k", owner, FencingToken(9)).await.expect("raise"));
    assert!(!b.release("k", owner).await.expect("release"));
    // Granted again, the owner holds it again.
    b.try_acquire(&request("k", owner, &signal)).await.expect("acquire");
    assert_eq!(b.renew(&items[..1]).await.expect("renew"), [true]);
}
