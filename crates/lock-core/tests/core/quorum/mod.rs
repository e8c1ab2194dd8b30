//! `QuorumBackend` over in-memory members, some of them made to fail, hang or lag by a small
//! decorator: majority rules for acquire, release and renew, undo of partial grants, the
//! validity time and drift allowance, cancellation and merged notifications. Paused time: the
//! hangs and lags are virtual, so the suite takes no real time. Here the faulty member; the cases
//! in `grants`, `holds` and `fences`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_core::backend::{AcquireRequest, Attempt, Capability, Grant, RenewItem, Side, Subscription};
use lock_core::backend::{Admin, Notify, RaiseFence};
use lock_core::{
    FencingToken, LeaseSignal, LockBackend, LockError, Locker, MemoryBackend, OwnerToken, QuorumBackend,
    Result, async_trait, drift_allowance,
};
use tokio::time::{Instant, timeout};

mod evict;
mod fences;
mod grants;
mod holds;

/// What a [`Faulty`] member does with every call.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Fault {
    None,
    /// Answer a temporary error.
    Down,
    /// Answer a permanent error.
    Broken,
    /// Never answer.
    Hang,
    /// Answer after this delay.
    Lag(Duration),
}

/// A member backend: a `MemoryBackend` behind a switchable fault, and a second one for
/// `raise_fence` alone (the fencing write-back).
#[derive(Debug, Clone)]
struct Faulty {
    mem: MemoryBackend,
    fault: Arc<Mutex<Fault>>,
    raise_fault: Arc<Mutex<Fault>>,
    /// Declares `raise_fence` (a member without it makes the quorum unfenced).
    can_raise: bool,
}

impl Faulty {
    fn new() -> Self {
        Faulty {
            mem: MemoryBackend::new(),
            fault: Arc::new(Mutex::new(Fault::None)),
            raise_fault: Arc::new(Mutex::new(Fault::None)),
            can_raise: true,
        }
    }

    fn set(&self, f: Fault) {
        *self.fault.lock().expect("fault") = f;
    }

    fn set_raise(&self, f: Fault) {
        *self.raise_fault.lock().expect("fault") = f;
    }

    /// Advance this member's fence counter by `n` grants (on another key), so the members'
    /// counters drift apart.
    async fn bump(&self, n: usize) {
        let signal = LeaseSignal::new();
        for _ in 0..n {
            let owner = OwnerToken::random();
            let req = AcquireRequest {
                key: "bump",
                owner,
                lease: LEASE,
                wait_until: None,
                signal: &signal,
                side: Side::Exclusive,
            };
            grant(self.mem.try_acquire(&req).await.expect("bump"));
            assert!(self.mem.release("bump", owner).await.expect("release"));
        }
    }

    async fn gate(&self) -> Result<()> {
        let f = *self.fault.lock().expect("fault");
        Self::apply(f).await
    }

    async fn apply(f: Fault) -> Result<()> {
        match f {
            Fault::None => Ok(()),
            Fault::Down => Err(LockError::temporary("faulty", "member down")),
            Fault::Broken => Err(LockError::permanent("faulty", "member misconfigured")),
            Fault::Hang => std::future::pending().await,
            Fault::Lag(d) => {
                tokio::time::sleep(d).await;
                Ok(())
            }
        }
    }
}

#[async_trait]
impl LockBackend for Faulty {
    fn name(&self) -> &'static str {
        "faulty"
    }
    fn capabilities(&self) -> Capability {
        self.mem.capabilities()
    }
    async fn try_acquire(&self, req: &AcquireRequest<'_>) -> Result<Attempt> {
        self.gate().await?;
        self.mem.try_acquire(req).await
    }
    async fn release(&self, key: &str, owner: OwnerToken) -> Result<bool> {
        self.gate().await?;
        self.mem.release(key, owner).await
    }
    async fn renew(&self, items: &[RenewItem<'_>]) -> Result<Vec<bool>> {
        self.gate().await?;
        self.mem.renew(items).await
    }
    fn identity(&self) -> String {
        self.mem.identity()
    }
    async fn inspect(&self, key: &str) -> Result<lock_core::LockInfo> {
        self.gate().await?;
        self.mem.inspect(key).await
    }

    lock_core::backend::hand_out!(notify);

    fn fences(&self) -> Option<&dyn RaiseFence> {
        self.can_raise.then_some(self as &dyn RaiseFence)
    }

    lock_core::backend::hand_out!(admin);
}

#[async_trait]
impl Notify for Faulty {
    async fn subscribe(&self, key: &str) -> Result<Option<Subscription>> {
        self.gate().await?;
        self.mem.subscribe(key).await
    }
}

#[async_trait]
impl RaiseFence for Faulty {
    async fn raise_fence(&self, key: &str, owner: OwnerToken, floor: FencingToken) -> Result<bool> {
        self.gate().await?;
        let f = *self.raise_fault.lock().expect("fault");
        Self::apply(f).await?;
        self.mem.raise_fence(key, owner, floor).await
    }
}

#[async_trait]
impl Admin for Faulty {
    async fn list(&self, prefix: &str, limit: usize) -> Result<Vec<String>> {
        self.mem.list(prefix, limit).await
    }

    async fn evict(&self, key: &str, fence: FencingToken) -> Result<bool> {
        self.gate().await?;
        self.mem.evict(key, fence).await
    }
}

fn members(n: usize) -> Vec<Faulty> {
    (0..n).map(|_| Faulty::new()).collect()
}

fn quorum(ms: &[Faulty]) -> QuorumBackend {
    QuorumBackend::new(ms.iter().map(|m| Arc::new(m.clone()) as Arc<dyn LockBackend>).collect())
        .expect("quorum")
}

fn held_on(ms: &[Faulty], key: &str) -> usize {
    ms.iter().filter(|m| m.mem.remaining(key).is_some()).count()
}

async fn attempt(q: &QuorumBackend, key: &str, owner: OwnerToken, lease: Duration) -> Result<Attempt> {
    let signal = LeaseSignal::new();
    q.try_acquire(&AcquireRequest {
        key,
        owner,
        lease,
        wait_until: None,
        signal: &signal,
        side: Side::Exclusive,
    })
    .await
}

fn grant(a: Attempt) -> Grant {
    match a {
        Attempt::Acquired(g) => g,
        other => panic!("expected a grant, got {other:?}"),
    }
}

/// Take `key` on the given members directly, as another owner would.
async fn occupy(ms: &[Faulty], key: &str, lease: Duration) {
    let signal = LeaseSignal::new();
    let owner = OwnerToken::random();
    for m in ms {
        let req =
            AcquireRequest { key, owner, lease, wait_until: None, signal: &signal, side: Side::Exclusive };
        grant(m.mem.try_acquire(&req).await.expect("occupy"));
    }
}

const LEASE: Duration = Duration::from_millis(400);
