//! The in-process backend: full capabilities for tasks of one process.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use crate::backend::registry::{Connected, Descriptor, Local};
use crate::backend::{
    AcquireRequest, Attempt, Capability, Grant, LocalRecord, LockBackend, LockInfo, Mutex, NotifyHub, Record,
    RecordOp, RenewItem, Side, Subscription,
};
use crate::{FencingToken, OwnerToken, Result};

mod shared;

use crate::backend::{Admin, Notes, Notify, RaiseFence, Records};
use shared::{Readers, Shared, Wake};

#[derive(Debug)]
struct Hold {
    owner: OwnerToken,
    count: u32,
    expires: Instant,
    fence: u64,
    // Dies with the hold: a later holder starts without one.
    note: Option<String>,
    /// A shared request was refused by this hold (or by its writer's mark before it): its
    /// release wakes every waiter, since every waiting reader can enter.
    readers_wait: bool,
}

/// How long a waiter woken by a release has the key to itself before anyone may take it.
const CLAIM: Duration = Duration::from_millis(10);

/// Expired holds are swept out of the table every this many new holds: the table stays
/// proportional to the live keys at an amortised O(1) per acquisition.
const SWEEP_EVERY: u64 = 1024;

#[derive(Debug, Default)]
struct Table {
    holds: HashMap<String, Hold>,
    /// Keys with shared holds, or a writer waiting for them to leave.
    readers: HashMap<String, Readers>,
    /// Records, apart from the locks.
    records: HashMap<String, LocalRecord>,
    inserts: u64,
}

#[derive(Debug, Default)]
struct Inner {
    locks: Mutex<Table>,
    // One counter for every key: strictly increasing per key too, and nothing to clean up.
    fence: AtomicU64,
    hub: NotifyHub,
}

/// Locks in this process's memory: leases that expire, renewal, fencing tokens, release
/// notifications and reentrancy. Clones share the same lock table.
///
/// Not a mock: it is the embedded default for single-process use, examples and the bench.
#[derive(Debug, Clone, Default)]
pub struct MemoryBackend {
    inner: Arc<Inner>,
}

impl MemoryBackend {
    /// An empty lock table.
    pub fn new() -> Self {
        Self::default()
    }

    fn locks(&self) -> MutexGuard<'_, Table> {
        self.inner.locks.lock()
    }

    /// Number of entries in the lock table, expired ones not yet swept included.
    pub fn table_len(&self) -> usize {
        self.locks().holds.len()
    }

    /// Fault hook: delete `key` behind its holder's back (as `DEL` would on a server).
    /// Returns whether a live lock was removed.
    pub fn sever(&self, key: &str) -> bool {
        let now = Instant::now();
        let mut table = self.locks();
        let shared = table.readers.remove(key).is_some_and(|mut r| r.count(now) > 0);
        let removed = table.holds.remove(key).is_some_and(|h| h.expires > now) || shared;
        drop(table);
        self.inner.hub.notify(key);
        removed
    }
}

#[async_trait]
impl LockBackend for MemoryBackend {
    fn name(&self) -> &'static str {
        "memory"
    }

    fn capabilities(&self) -> Capability {
        Capability {
            renew: true,
            fencing: true,
            reentrant: true,
            shared: true,
            permits: true,
            upgrade: true,
            ..Capability::NONE
        }
    }

    fn identity(&self) -> String {
        // One process only: the table's address names it, and clones share it.
        format!("memory://{:p}", Arc::as_ptr(&self.inner))
    }

    async fn try_acquire(&self, req: &AcquireRequest<'_>) -> Result<Attempt> {
        let now = Instant::now();
        let mut guard = self.locks();
        let table = &mut *guard;
        if let Some(h) = table.holds.get_mut(req.key)
            && h.expires > now
        {
            if h.owner != req.owner || req.side.is_shared() {
                h.readers_wait |= req.side.is_shared();
                return Ok(Attempt::Held { retry_after: Some(h.expires - now) });
            }
            h.count += 1;
            h.expires = h.expires.max(now + req.lease);
            return Ok(Attempt::Acquired(Grant {
                fence: FencingToken(h.fence),
                lease: Some(req.lease),
                slot: None,
            }));
        }
        // The key is free (of exclusive holds). A release woke a waiter that has not tried
        // yet: it is that waiter's to take for a moment. Nothing in this table waits, so a
        // client that released and asks again would otherwise take the key back before the
        // woken waiter runs, every time. A reader takes nothing from it: readers share, and a
        // woken writer that finds readers marks the key and is woken by the last of them.
        let reader = req.side.is_shared() && req.side.permits().is_none();
        if !reader
            && let Some(since) = self.inner.hub.woken_other(req.key, req.owner.encode(&mut [0; 32]))
            && since < CLAIM
        {
            return Ok(Attempt::Held { retry_after: Some(CLAIM - since) });
        }
        if req.side.is_shared() {
            let readers = table.readers.entry(req.key.to_owned()).or_default();
            let fence = &self.inner.fence;
            let drawn = || fence.fetch_add(1, Ordering::Relaxed) + 1;
            return Ok(match readers.share(req.owner, req.lease, now, req.side.permits(), drawn) {
                // A reader draws no fence: it carries the latest one drawn.
                Shared::Granted(permit) => Attempt::Acquired(Grant {
                    fence: FencingToken(permit.map_or_else(|| fence.load(Ordering::Relaxed), |p| p.1)),
                    lease: Some(req.lease),
                    slot: permit.map(|p| p.0),
                }),
                Shared::Refused(after) => Attempt::Held { retry_after: Some(after) },
            });
        }
        let upgrading = match req.side {
            Side::Upgrade { reader } => Some(reader),
            _ => None,
        };
        let mut readers_wait = false;
        if let Some(readers) = table.readers.get_mut(req.key) {
            if let Some(after) = readers.exclude(now, req.owner, upgrading) {
                // The last reader's release wakes this writer by name.
                self.inner.hub.wake_by_name(req.key);
                return Ok(Attempt::Held { retry_after: Some(after) });
            }
            readers_wait = std::mem::take(&mut readers.refused);
            // An upgraded reader keeps its read hold until it releases it.
            if upgrading.is_none() {
                table.readers.remove(req.key);
            }
        }
        let fence = self.inner.fence.fetch_add(1, Ordering::Relaxed) + 1;
        table.inserts += 1;
        if table.inserts.is_multiple_of(SWEEP_EVERY) {
            // The fence is one global counter, so forgetting a key never lets its fence repeat.
            table.holds.retain(|_, h| h.expires > now);
            table.readers.retain(|_, r| !r.is_idle(now));
        }
        table.holds.insert(
            req.key.to_owned(),
            Hold { owner: req.owner, count: 1, expires: now + req.lease, fence, note: None, readers_wait },
        );
        Ok(Attempt::Acquired(Grant { fence: FencingToken(fence), lease: Some(req.lease), slot: None }))
    }

    async fn release(&self, key: &str, owner: OwnerToken) -> Result<bool> {
        let now = Instant::now();
        let wake = {
            let mut table = self.locks();
            match table.holds.get_mut(key) {
                Some(h) if h.owner == owner && h.expires > now => {
                    h.count -= 1;
                    if h.count > 0 {
                        return Ok(true);
                    }
                    let readers_wait = h.readers_wait;
                    table.holds.remove(key);
                    if readers_wait { Wake::All } else { Wake::One }
                }
                _ => match table.readers.get_mut(key).and_then(|r| r.release(owner, now)) {
                    Some(wake) => wake,
                    None => return Ok(false),
                },
            }
        };
        let hub = &self.inner.hub;
        match wake {
            // Readers wait: they can all enter (a writer among them is held back by the mark
            // it sets on finding them).
            Wake::All => hub.notify(key),
            // One waiter, not the herd: only one can take the key (or, for permits, the woken
            // one passes the wake-up on once it has taken its own).
            Wake::One => hub.notify_one(key),
            Wake::Writer(w) => hub.notify_next(key, Some(w.encode(&mut [0; 32]))),
            Wake::Nobody => {}
        }
        Ok(true)
    }

    async fn renew(&self, items: &[RenewItem<'_>]) -> Result<Vec<bool>> {
        let now = Instant::now();
        let mut table = self.locks();
        Ok(items
            .iter()
            .map(|it| match table.holds.get_mut(it.key) {
                Some(h) if h.owner == it.owner && h.expires > now => {
                    // Only ever extend: another guard of this hold may hold a longer lease.
                    h.expires = h.expires.max(now + it.lease);
                    true
                }
                _ => table.readers.get_mut(it.key).is_some_and(|r| r.renew(it.owner, it.lease, now)),
            })
            .collect())
    }

    async fn inspect(&self, key: &str) -> Result<LockInfo> {
        let now = Instant::now();
        let mut table = self.locks();
        if let Some(h) = table.holds.get(key).filter(|h| h.expires > now) {
            return Ok(LockInfo {
                remaining: Some(h.expires - now),
                fence: Some(FencingToken(h.fence)),
                owner: Some(LockInfo::short_owner(&h.owner.to_string())),
                ..LockInfo::held()
            });
        }
        let Some(r) = table.readers.get_mut(key) else { return Ok(LockInfo::free()) };
        Ok(match r.count(now) {
            0 => LockInfo::free(),
            n => LockInfo { readers: Some(n), permits: r.permits(now), ..LockInfo::held() },
        })
    }

    crate::hand_out!(notify, notes, fences, records, admin);
}

#[async_trait]
impl Notify for MemoryBackend {
    async fn subscribe(&self, key: &str) -> Result<Option<Subscription>> {
        Ok(Some(self.inner.hub.subscribe(key).0))
    }
}

#[async_trait]
impl Notes for MemoryBackend {
    async fn set_note(&self, key: &str, owner: OwnerToken, note: &str) -> Result<bool> {
        let now = Instant::now();
        let mut table = self.locks();
        Ok(match table.holds.get_mut(key) {
            Some(h) if h.owner == owner && h.expires > now => {
                h.note = Some(note.to_owned());
                true
            }
            _ => table.readers.get_mut(key).is_some_and(|r| r.note(owner, note, now)),
        })
    }

    async fn note(&self, key: &str) -> Result<Option<String>> {
        let now = Instant::now();
        Ok(self.locks().holds.get(key).filter(|h| h.expires > now).and_then(|h| h.note.clone()))
    }
}

#[async_trait]
impl RaiseFence for MemoryBackend {
    async fn raise_fence(&self, key: &str, owner: OwnerToken, floor: FencingToken) -> Result<bool> {
        let now = Instant::now();
        let table = self.locks();
        Ok(match table.holds.get(key) {
            Some(h) if h.owner == owner && h.expires > now => {
                // The counter is shared by every key: raising it for one raises it for all,
                // which keeps each key's tokens increasing too.
                self.inner.fence.fetch_max(floor.0, Ordering::Relaxed);
                true
            }
            _ => false,
        })
    }
}

#[async_trait]
impl Records for MemoryBackend {
    async fn record(&self, key: &str, op: RecordOp<'_>) -> Result<Record> {
        let mut table = self.locks();
        let (record, keep) = table.records.entry(key.to_owned()).or_default().apply(op);
        if !keep {
            table.records.remove(key);
        }
        drop(table);
        if !matches!(op, RecordOp::Get) {
            // A latch's waiters subscribe to its key.
            self.inner.hub.notify(key);
        }
        Ok(record)
    }
}

#[async_trait]
impl Admin for MemoryBackend {
    async fn list(&self, prefix: &str, limit: usize) -> Result<Vec<String>> {
        let now = Instant::now();
        let mut table = self.locks();
        let mut keys: Vec<String> = table
            .holds
            .iter()
            .filter(|(k, h)| h.expires > now && k.starts_with(prefix))
            .map(|(k, _)| k.clone())
            .collect();
        for (k, r) in table.readers.iter_mut() {
            if k.starts_with(prefix) && r.count(now) > 0 {
                keys.push(k.clone());
            }
        }
        keys.sort();
        keys.dedup();
        keys.truncate(limit);
        Ok(keys)
    }

    async fn evict(&self, key: &str, fence: FencingToken) -> Result<bool> {
        let now = Instant::now();
        {
            let mut table = self.locks();
            if !table.holds.get(key).is_some_and(|h| h.expires > now && h.fence == fence.0) {
                return Ok(false);
            }
            table.holds.remove(key);
        }
        self.inner.hub.notify(key);
        Ok(true)
    }
}

/// Remaining lease of `key` (for tests and `status` commands).
impl MemoryBackend {
    /// Remaining lease of `key`, if it is held.
    pub fn remaining(&self, key: &str) -> Option<Duration> {
        let now = Instant::now();
        self.locks().holds.get(key).filter(|h| h.expires > now).map(|h| h.expires - now)
    }
}

impl MemoryBackend {
    /// The in-process store in the registry: `memory://<table>`, one table per name, so every
    /// "client" of `memory://x` in this process shares the locks of x.
    pub const DESCRIPTOR: Descriptor = Descriptor {
        name: "memory",
        schemes: &["memory"],
        urls: "`memory://<table>`",
        summary: "in-process table, shared by every `from_url` with the same name",
        connect: |url| Box::pin(async move { Ok(named_table(url) as Connected) }),
        modes: &[],
        local: Some(|| Ok(Local { url: "memory://bench".into(), keep: Box::new(()) })),
        watchdog_locks: None,
        session_lease: None,
    };
}

fn named_table(url: &str) -> Arc<MemoryBackend> {
    static TABLES: std::sync::LazyLock<Mutex<HashMap<String, MemoryBackend>>> =
        std::sync::LazyLock::new(Mutex::default);
    let name = url.split_once("://").map_or(url, |(_, name)| name);
    Arc::new(TABLES.lock().entry(name.trim_end_matches('/').to_owned()).or_default().clone())
}
