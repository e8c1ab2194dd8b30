//! A semaphore of slot keys, where the store keeps no permits: a permit is one of `permits`
//! mutexes, taken by trying the slots that may be free, or by queueing on one slot at a time
//! where waiters queue in the server.

use std::sync::atomic::Ordering;
use std::time::Duration;

use futures_util::future::join_all;
use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio::time::Instant;

use super::{Permit, Semaphore};
use crate::{LockError, Result};

impl Semaphore {
    pub(crate) fn slot_request(&self, slot: u32, lease: Option<Duration>) -> crate::LockRequest<'_> {
        let req = self.locker.lock(self.slot_key(slot));
        match lease {
            Some(l) => req.lease(l),
            None => req,
        }
    }

    /// The slots of `slots` worth attempting: where a refused attempt writes to the store
    /// ([`Capability::refusal_writes`](crate::Capability)), those an inspection finds free, in
    /// the given order; all of them elsewhere, where the backend cannot inspect, or where an
    /// inspection fails (the attempt then reports the error).
    pub(super) async fn maybe_free(&self, slots: Vec<u32>) -> Vec<u32> {
        if slots.is_empty()
            || !self.locker.backend().capabilities().refusal_writes
            || self.no_inspect.load(Ordering::Relaxed)
        {
            return slots;
        }
        let backend = self.locker.backend();
        let keys: Vec<String> = slots.iter().map(|&i| self.slot_key(i)).collect();
        let answers = join_all(keys.iter().map(|k| backend.inspect(k))).await;
        let mut free = Vec::with_capacity(slots.len());
        for (slot, answer) in slots.into_iter().zip(answers) {
            match answer {
                Ok(info) if info.held => {}
                Ok(_) => free.push(slot),
                Err(LockError::Unsupported { .. }) => {
                    self.no_inspect.store(true, Ordering::Relaxed);
                    free.push(slot);
                }
                Err(_) => free.push(slot),
            }
        }
        free
    }

    /// Take a permit: an attempt on a random slot, then on the others found free, then
    /// (unless `once`) a wait on every slot at once until `deadline`.
    pub(crate) async fn take(
        &self,
        once: bool,
        deadline: Option<Instant>,
        lease: Option<Duration>,
    ) -> Result<Option<Permit>> {
        if self.native {
            return self.take_pooled(once, deadline, lease).await;
        }
        let started = Instant::now();
        let n = self.permits;
        let start = fastrand::u32(0..n);
        if let Some(guard) = self.checked_attempt(self.slot_request(start, lease), once, deadline).await? {
            return Ok(Some(Permit { slot: start, guard }));
        }
        // The random slot was held: look at the others before attempting them where every
        // attempt is a write (etcd puts a queue key per attempt, then deletes it): one read of
        // each slot at once then costs far less than an attempt on each held one.
        let others: Vec<u32> = (1..n).map(|j| (start + j) % n).collect();
        for slot in self.maybe_free(others).await {
            if let Some(guard) = self.slot_request(slot, lease).try_acquire().await? {
                return Ok(Some(Permit { slot, guard }));
            }
        }
        if once {
            return Ok(None);
        }
        let backend = self.locker.backend();
        if backend.capabilities().native_wait || backend.queue().is_some() {
            return self.take_queued(deadline, lease, started).await;
        }
        // Every slot was held: wait on all of them. The first grant wins; the other waits are
        // dropped, which leaves nothing held (lock acquisitions are cancellation-safe).
        let mut waits: FuturesUnordered<_> = (0..n)
            .map(|slot| {
                let mut req = self.slot_request(slot, lease);
                if let Some(d) = deadline {
                    req = req.wait(d.saturating_duration_since(Instant::now()));
                }
                async move { (slot, req.acquire().await) }
            })
            .collect();
        let mut failure = None;
        while let Some((slot, result)) = waits.next().await {
            match result {
                Ok(guard) => return Ok(Some(Permit { slot, guard })),
                // Every wait ends at the same deadline: report the semaphore, not one slot.
                Err(LockError::Timeout { .. }) => {}
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            }
        }
        Err(failure
            .unwrap_or_else(|| LockError::Timeout { key: self.name.to_string(), waited: started.elapsed() }))
    }
}

/// How long a waiter stays in one slot's server-side queue before it looks at every slot
/// again: the most a permit freed elsewhere can sit unused while this waiter queues.
const QUEUE_SLICE: Duration = Duration::from_millis(500);

impl Semaphore {
    /// The wait of a backend whose waiters take a place in a server-side queue (etcd and
    /// ZooKeeper create a node or key, PostgreSQL and MySQL park a connection, Redis joins a
    /// wait set): queue on one slot at a time, in slices, rescanning every slot between them.
    /// Queueing on every slot at once (what notification backends do) made each grant cost a
    /// queue entry per slot, and a grant to a waiter that had just won elsewhere was handed
    /// straight back: etcd did a third of the 10 x 1000 test in five minutes.
    async fn take_queued(
        &self,
        deadline: Option<Instant>,
        lease: Option<Duration>,
        started: Instant,
    ) -> Result<Option<Permit>> {
        let n = self.permits;
        loop {
            let left = match deadline {
                Some(d) => d.saturating_duration_since(Instant::now()),
                None => QUEUE_SLICE,
            };
            if left.is_zero() {
                return Err(LockError::Timeout { key: self.name.to_string(), waited: started.elapsed() });
            }
            let slot = fastrand::u32(0..n);
            match self.slot_request(slot, lease).wait(left.min(QUEUE_SLICE)).acquire().await {
                Ok(guard) => return Ok(Some(Permit { slot, guard })),
                Err(LockError::Timeout { .. }) => {}
                Err(e) => return Err(e),
            }
            // A slot freed while this waiter queued elsewhere: take it now.
            let all: Vec<u32> = (0..n).filter(|&s| s != slot).collect();
            for s in self.maybe_free(all).await {
                if let Some(guard) = self.slot_request(s, lease).try_acquire().await? {
                    return Ok(Some(Permit { slot: s, guard }));
                }
            }
        }
    }
}
