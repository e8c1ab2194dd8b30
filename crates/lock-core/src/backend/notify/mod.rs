//! Release notifications: a per-key epoch counter that wakes every waiter, named wake-ups
//! that wake only the waiter next in line, and single wake-ups that wake one waiter, whichever
//! waited longest, for stores with no queue to name the next from.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use std::time::Duration;

use tokio::sync::{Notify, watch};
use tokio::time::Instant;

pub(crate) use self::epoch::{Epoch, EpochRx};
use super::Mutex;

type IdleHook = Arc<dyn Fn(&str) + Send + Sync>;

struct Entry {
    /// Broadcast epoch: a release that names nobody (not a `watch`: see `epoch.rs`).
    tx: Epoch,
    subscribers: usize,
    /// Waiters in [`Subscription::notified_for`], by the owner they wait as.
    named: HashMap<Arc<str>, Arc<Notify>>,
    /// The last owner named while not yet waiting here: its wake-up is kept for it.
    pending: Option<Arc<str>>,
    /// Single wake-ups ([`NotifyHub::notify_one`]): one waiter in [`Subscription::notified`],
    /// or, with none waiting, the next to wait.
    one: Arc<One>,
    /// A single wake-up is out: its waiter has not come back (to wait again, with the lock, or
    /// gone). One at a time, so that woken waiters never race each other for the key.
    out: Option<Out>,
    /// A single wake-up came while one was out: given when that one comes back without the
    /// lock (the release it tells of may have come after that waiter's attempt).
    kept: bool,
}

/// A key's single wake-ups, and whether its waiters in [`Subscription::notified_as`] register
/// their names (see [`NotifyHub::wake_by_name`]).
#[derive(Default)]
struct One {
    notify: Notify,
    by_name: AtomicBool,
}

#[derive(Default)]
struct Inner {
    keys: HashMap<String, Entry>,
}

/// A registry of waiters per key, shared by a backend's notification source (its pub/sub
/// dispatcher, its watch callbacks, its own release path) and the waiting core.
#[derive(Clone, Default)]
pub struct NotifyHub {
    inner: Arc<Mutex<Inner>>,
    on_idle: Option<IdleHook>,
}

impl fmt::Debug for NotifyHub {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let keys = self.inner.lock().keys.len();
        f.debug_struct("NotifyHub").field("keys", &keys).finish()
    }
}

impl NotifyHub {
    /// An empty hub.
    pub fn new() -> Self {
        Self::default()
    }

    /// A hub that calls `hook(key)` when the last subscriber of `key` goes away (to
    /// `UNSUBSCRIBE`, drop a watch, ...).
    pub fn with_idle_hook(hook: impl Fn(&str) + Send + Sync + 'static) -> Self {
        NotifyHub { inner: Arc::default(), on_idle: Some(Arc::new(hook)) }
    }

    /// Register a waiter on `key`. The flag is `true` for the key's first subscriber, when the
    /// backend must start listening on the server before returning the subscription.
    pub fn subscribe(&self, key: &str) -> (Subscription, bool) {
        let mut inner = self.inner.lock();
        let (rx, one, first) = match inner.keys.get_mut(key) {
            Some(e) => {
                e.subscribers += 1;
                (e.tx.subscribe(), e.one.clone(), false)
            }
            None => {
                let tx = Epoch::new();
                let rx = tx.subscribe();
                let one = Arc::new(One::default());
                let entry = Entry {
                    tx,
                    subscribers: 1,
                    named: HashMap::new(),
                    pending: None,
                    one: one.clone(),
                    out: None,
                    kept: false,
                };
                inner.keys.insert(key.to_owned(), entry);
                (rx, one, true)
            }
        };
        let leave = Leave { hub: self.clone(), key: key.to_owned(), named: None };
        let sub = Subscription {
            rx: Source::Hub(rx),
            one: Some(one),
            keep: None,
            woken: false,
            leave: Some(leave),
        };
        (sub, first)
    }

    /// Wake one waiter of `key` in [`Subscription::notified`], the one that waited longest, or
    /// with none waiting, the next to wait: a release of a lock that one holder at a time can
    /// take wakes one task, not the herd. While that waiter is out (attempting), further
    /// wake-ups are kept, and the next waiter gets one when it comes back without the lock;
    /// one that gives up passes its wake-up on, so a waiter that goes never strands the others
    /// (see [`Subscription::granted`]).
    pub fn notify_one(&self, key: &str) {
        if let Some(e) = self.inner.lock().keys.get_mut(key) {
            if e.out.is_some() {
                e.kept = true;
            } else {
                e.out = Some(Out::now());
                e.one.notify.notify_one();
            }
        }
    }

    /// How long ago a waiter other than `owner` was woken to try `key` (by a single wake-up,
    /// and has not come back yet). A store where nothing waits (the in-process table) lets it
    /// try first, or the client that released would take the key back every time.
    pub fn woken_other(&self, key: &str, owner: &str) -> Option<Duration> {
        let inner = self.inner.lock();
        let out = inner.keys.get(key)?.out.as_ref()?;
        (out.to.as_deref() != Some(owner)).then(|| out.since.elapsed())
    }

    /// The waiter as `owner` got the single wake-up of `key` that is out.
    fn claim(&self, key: &str, owner: &str) {
        if let Some(out) = self.inner.lock().keys.get_mut(key).and_then(|e| e.out.as_mut()) {
            out.to = Some(Arc::from(owner));
        }
    }

    /// The waiter of the single wake-up that is out came back: `Taken` (it holds the lock,
    /// whose release wakes the next), `Refused` (it waits again: a wake-up kept meanwhile goes
    /// out now) or `Unused` (gone without attempting: its wake-up goes to the next).
    fn back(&self, key: &str, how: Back) {
        let mut inner = self.inner.lock();
        let Some(e) = inner.keys.get_mut(key) else { return };
        let again = match how {
            Back::Taken => false,
            Back::Refused => e.kept,
            Back::Unused => true,
        };
        e.kept = false;
        e.out = again.then(Out::now);
        if again {
            e.one.notify.notify_one();
        }
    }

    /// From now on until its last waiter leaves, the waiters of `key` in
    /// [`Subscription::notified_as`] can be woken by name ([`NotifyHub::notify_next`]): a store
    /// that will know which waiter alone can take the key (the writer the last reader leaves it
    /// to) says so first. Waiters do not register their names otherwise, which costs an
    /// allocation and an insertion per wait.
    pub fn wake_by_name(&self, key: &str) {
        if let Some(e) = self.inner.lock().keys.get(key) {
            e.one.by_name.store(true, Ordering::Relaxed);
        }
    }

    /// Wake every waiter of `key` (no-op without subscribers).
    pub fn notify(&self, key: &str) {
        self.notify_next(key, None);
    }

    /// Wake the waiters of `key`, or with `next` only the one waiting as that owner in
    /// [`Subscription::notified_for`]: a fair release wakes one task, not the herd. A named
    /// owner that is not waiting yet finds its wake-up when it starts to.
    pub fn notify_next(&self, key: &str, next: Option<&str>) {
        let mut inner = self.inner.lock();
        let Some(e) = inner.keys.get_mut(key) else { return };
        match next {
            None => e.tx.bump(),
            Some(owner) => match e.named.get(owner) {
                Some(n) => n.notify_one(),
                None => e.pending = Some(Arc::from(owner)),
            },
        }
    }

    /// End the current wait of every waiter of `key` with "source gone" (`false`): their
    /// notifications stopped (the listener died), so they poll, and subscribe again to get a
    /// new one. Later subscribers of the key are not affected.
    pub fn close(&self, key: &str) {
        if let Some(e) = self.inner.lock().keys.get_mut(key) {
            // The waiters' receivers see their sender dropped.
            e.tx = Epoch::new();
            (e.out, e.kept) = (None, false);
        }
    }

    /// Wake every waiter of every key (after a reconnect, when messages may have been missed).
    pub fn notify_all(&self) {
        for e in self.inner.lock().keys.values() {
            e.tx.bump();
        }
    }

    /// Keys that currently have waiters.
    pub fn keys(&self) -> Vec<String> {
        self.inner.lock().keys.keys().cloned().collect()
    }

    /// Wait as `owner` on `key`: the wake-up, and whether one was already kept for it.
    fn wait_as(&self, key: &str, owner: &str) -> Option<(Arc<str>, Arc<Notify>, bool)> {
        let mut inner = self.inner.lock();
        let e = inner.keys.get_mut(key)?;
        let name: Arc<str> = Arc::from(owner);
        let notify = e.named.entry(name.clone()).or_default().clone();
        let kept = e.pending.as_deref() == Some(owner);
        if kept {
            e.pending = None;
        }
        Some((name, notify, kept))
    }

    fn leave(&self, key: &str, named: Option<(Arc<str>, Arc<Notify>)>) {
        let idle = {
            let mut inner = self.inner.lock();
            match inner.keys.get_mut(key) {
                Some(e) if e.subscribers > 1 => {
                    e.subscribers -= 1;
                    if let Some((name, n)) = named
                        && e.named.get(&name).is_some_and(|m| Arc::ptr_eq(m, &n))
                    {
                        e.named.remove(&name);
                    }
                    false
                }
                Some(_) => {
                    inner.keys.remove(key);
                    true
                }
                None => false,
            }
        };
        if idle && let Some(hook) = &self.on_idle {
            hook(key);
        }
    }
}

struct Leave {
    hub: NotifyHub,
    key: String,
    named: Option<(Arc<str>, Arc<Notify>)>,
}

impl Drop for Leave {
    fn drop(&mut self) {
        self.hub.leave(&self.key, self.named.take());
    }
}

/// A waiter's registration for release notifications of one key; unsubscribes on drop.
pub struct Subscription {
    rx: Source,
    /// The key's single wake-ups (hub subscriptions only).
    one: Option<Arc<One>>,
    /// Whatever must live as long as this waiter (the listener that feeds its hub).
    keep: Option<Box<dyn std::any::Any + Send + Sync>>,
    /// The last wait ended on a single wake-up that is not used yet: passed on at drop.
    woken: bool,
    leave: Option<Leave>,
}

/// A waiter's registration for wake-ups naming it.
enum Named {
    /// One came before it waited: it is woken already.
    Kept,
    /// Its wake-up.
    Wait(Arc<Notify>),
    /// Not a hub's subscription, or its key is gone: nothing names it.
    Unnamed,
}

impl Subscription {
    /// Wait as `owner` for wake-ups naming it (registered once per owner).
    fn named(&mut self, owner: &str) -> Named {
        let Some(leave) = self.leave.as_mut() else { return Named::Unnamed };
        if leave.named.as_ref().is_none_or(|(name, _)| &**name != owner) {
            let Some((name, notify, kept)) = leave.hub.wait_as(&leave.key, owner) else {
                return Named::Unnamed;
            };
            leave.named = Some((name, notify));
            if kept {
                return Named::Kept;
            }
        }
        leave.named.as_ref().map_or(Named::Unnamed, |(_, n)| Named::Wait(n.clone()))
    }
}

/// A single wake-up that is out: since when, and the waiter that got it, once it says so.
struct Out {
    since: Instant,
    to: Option<Arc<str>>,
}

impl Out {
    fn now() -> Self {
        Out { since: Instant::now(), to: None }
    }
}

/// How the waiter of a single wake-up came back (see [`NotifyHub::back`]).
#[derive(Clone, Copy)]
enum Back {
    Taken,
    Refused,
    Unused,
}

impl Subscription {
    /// Tell the hub how the single wake-up this waiter got, if any, ended.
    fn back(&mut self, how: Back) {
        if std::mem::take(&mut self.woken)
            && let Some(leave) = &self.leave
        {
            leave.hub.back(&leave.key, how);
        }
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        // Woken as the one waiter and gone without taking the lock (a deadline, an error, the
        // future dropped): the next waiter gets the wake-up instead.
        self.back(Back::Unused);
    }
}

impl fmt::Debug for Subscription {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Subscription").field("key", &self.leave.as_ref().map(|l| &l.key)).finish()
    }
}

enum Source {
    Hub(EpochRx),
    Plain(watch::Receiver<u64>),
}

mod epoch;
mod wait;

#[cfg(test)]
mod tests;
