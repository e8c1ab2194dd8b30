//! One listener per key for every waiter of a quorum in this process. It listens on `n - q + 1`
//! members (a release reaches at least a quorum, so one of them publishes it) and turns each
//! release it hears into one waiter's wake-up: with a listener per waiter, every release woke
//! every waiter, and all but one found the key taken again.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use futures_util::future::join_all;
use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio::task::AbortHandle;
use tokio::time::timeout;

use super::failure::member_result;
use super::{NAME, QuorumBackend};
use crate::backend::{Mutex, NotifyHub, Subscription};
use crate::{LockError, Result};

/// The waiters of a quorum's keys and the listener of each key that has some.
#[derive(Default)]
pub(super) struct Listen {
    hub: NotifyHub,
    /// A key's listener, while a waiter keeps it: (its number, the listener).
    listeners: Mutex<HashMap<String, (u64, Weak<Listener>)>>,
    numbers: AtomicU64,
    /// A key's listener starts once at a time, so that two first waiters do not start two
    /// (and a slow member holds up only its own key).
    starting: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

/// A running listener; kept by every waiter of its key, stopped with the last.
struct Listener {
    task: AbortHandle,
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A waiter's pass through a key's start gate; the last one through (also if cancelled)
/// forgets the gate.
struct Gate<'a> {
    listen: &'a Listen,
    key: &'a str,
    gate: Arc<tokio::sync::Mutex<()>>,
}

impl Drop for Gate<'_> {
    fn drop(&mut self) {
        let mut starting = self.listen.starting.lock();
        // Only the map's and this one are left.
        if Arc::strong_count(&self.gate) <= 2 {
            starting.remove(self.key);
        }
    }
}

impl Listen {
    fn live(&self, key: &str) -> Option<Arc<Listener>> {
        self.listeners.lock().get(key).and_then(|(_, l)| l.upgrade())
    }
}

impl QuorumBackend {
    /// A waiter's subscription: to the key's listener, started with the key's first waiter.
    pub(super) async fn listen(&self, key: &str) -> Result<Option<Subscription>> {
        let listen = &self.listen;
        let (sub, _) = listen.hub.subscribe(key);
        if let Some(l) = listen.live(key) {
            return Ok(Some(sub.keeping(l)));
        }
        let gate = listen.starting.lock().entry(key.to_owned()).or_default().clone();
        let gate = Gate { listen, key, gate };
        let started = async {
            let _one_at_a_time = gate.gate.lock().await;
            if let Some(l) = listen.live(key) {
                return Ok(Some(l));
            }
            let Ok(rt) = tokio::runtime::Handle::try_current() else { return Ok(None) };
            let members = self.member_subscriptions(key).await?;
            if members.is_empty() {
                return Ok(None);
            }
            let number = listen.numbers.fetch_add(1, Ordering::Relaxed);
            let task = rt.spawn(forward(members, self.listen.clone(), key.to_owned(), number));
            let listener = Arc::new(Listener { task: task.abort_handle() });
            listen.listeners.lock().insert(key.to_owned(), (number, Arc::downgrade(&listener)));
            Ok(Some(listener))
        }
        .await;
        drop(gate);
        Ok(started?.map(|l| sub.keeping(l)))
    }

    /// Subscriptions on `n - q + 1` members, from the probe member on (every winner holds it),
    /// a member that cannot subscribe replaced by the next.
    async fn member_subscriptions(&self, key: &str) -> Result<Vec<Subscription>> {
        let t = self.other_timeout();
        let n = self.members.len();
        let start = self.probe.load(Ordering::Relaxed) % n;
        let mut order =
            (0..n).map(|k| (start + k) % n).filter(|i| self.members[*i].notify().is_some()).peekable();
        let mut want = n - self.quorum + 1;
        let mut subs = Vec::new();
        let mut failures = Vec::new();
        while want > 0 && order.peek().is_some() {
            let batch: Vec<usize> = order.by_ref().take(want).collect();
            let calls = batch.iter().map(|i| {
                let m = &self.members[*i];
                async move { member_result(timeout(t, m.subscribe(key)).await, t) }
            });
            for r in join_all(calls).await {
                match r {
                    Ok(Some(s)) => {
                        subs.push(s);
                        want -= 1;
                    }
                    Ok(None) => {}
                    Err(f) => failures.push(f),
                }
            }
        }
        match failures.into_iter().next() {
            Some(f) if subs.is_empty() => Err(LockError::temporary(NAME, f.to_string())),
            _ => Ok(subs),
        }
    }
}

/// Wake one waiter of `key` per notification heard on any member, until the last waiter goes
/// (the task is aborted) or every member's source is gone: the key's waiters are then told to
/// subscribe again (they poll meanwhile), which starts a new listener.
async fn forward(mut members: Vec<Subscription>, listen: Arc<Listen>, key: String, number: u64) {
    while !members.is_empty() {
        let event = {
            let mut any: FuturesUnordered<_> =
                members.iter_mut().enumerate().map(|(i, s)| async move { (i, s.notified().await) }).collect();
            any.next().await
        };
        match event {
            None => break,
            Some((_, true)) => listen.hub.notify_one(&key),
            Some((i, false)) => {
                members.swap_remove(i);
            }
        }
    }
    let mut listeners = listen.listeners.lock();
    if listeners.get(&key).is_some_and(|(n, _)| *n == number) {
        listeners.remove(&key);
    }
    drop(listeners);
    listen.hub.close(&key);
}
