//! Release notifications: a per-key epoch counter that wakes waiters.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use tokio::sync::watch;

use super::Mutex;

type IdleHook = Arc<dyn Fn(&str) + Send + Sync>;

/// A release epoch and, where the backend knows it, the owner next in line (fair queues).
type Wake = (u64, Option<Arc<str>>);

struct Entry {
    tx: watch::Sender<Wake>,
    subscribers: usize,
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
        let (rx, first) = match inner.keys.get_mut(key) {
            Some(e) => {
                e.subscribers += 1;
                (e.tx.subscribe(), false)
            }
            None => {
                let (tx, rx) = watch::channel((0, None));
                inner.keys.insert(key.to_owned(), Entry { tx, subscribers: 1 });
                (rx, true)
            }
        };
        let sub = Subscription {
            rx: Source::Hub(rx),
            leave: Some(Leave { hub: self.clone(), key: key.to_owned() }),
        };
        (sub, first)
    }

    /// Wake every waiter of `key` (no-op without subscribers).
    pub fn notify(&self, key: &str) {
        self.notify_next(key, None);
    }

    /// Wake the waiters of `key`, telling them which owner is next in line (`None`: anyone).
    /// A waiter in [`Subscription::notified_for`] sleeps on when another owner is named, so a
    /// fair release wakes one waiter, not the herd.
    pub fn notify_next(&self, key: &str, next: Option<&str>) {
        if let Some(e) = self.inner.lock().keys.get(key) {
            let next: Option<Arc<str>> = next.map(Arc::from);
            e.tx.send_modify(|(n, who)| {
                *n = n.wrapping_add(1);
                *who = next;
            });
        }
    }

    /// Wake every waiter of every key (after a reconnect, when messages may have been missed).
    pub fn notify_all(&self) {
        for e in self.inner.lock().keys.values() {
            e.tx.send_modify(|(n, who)| {
                *n = n.wrapping_add(1);
                *who = None;
            });
        }
    }

    /// Keys that currently have waiters.
    pub fn keys(&self) -> Vec<String> {
        self.inner.lock().keys.keys().cloned().collect()
    }

    fn leave(&self, key: &str) {
        let idle = {
            let mut inner = self.inner.lock();
            match inner.keys.get_mut(key) {
                Some(e) if e.subscribers > 1 => {
                    e.subscribers -= 1;
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
}

impl Drop for Leave {
    fn drop(&mut self) {
        self.hub.leave(&self.key);
    }
}

/// A waiter's registration for release notifications of one key; unsubscribes on drop.
pub struct Subscription {
    rx: Source,
    leave: Option<Leave>,
}

impl fmt::Debug for Subscription {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Subscription").field("key", &self.leave.as_ref().map(|l| &l.key)).finish()
    }
}

enum Source {
    Hub(watch::Receiver<Wake>),
    Plain(watch::Receiver<u64>),
}

impl Subscription {
    /// A subscription fed by the backend's own `watch` channel (backends that do not use
    /// [`NotifyHub`]). Send on the channel to wake the waiter.
    pub fn from_watch(rx: watch::Receiver<u64>) -> Self {
        Subscription { rx: Source::Plain(rx), leave: None }
    }

    /// Wait for the next release notification. Returns `false` if the source is gone (then
    /// the caller falls back to polling).
    pub async fn notified(&mut self) -> bool {
        match &mut self.rx {
            Source::Hub(rx) => rx.changed().await.is_ok(),
            Source::Plain(rx) => rx.changed().await.is_ok(),
        }
    }

    /// Wait for the next release notification that names `owner` as next in line, or names
    /// nobody. Returns `false` if the source is gone.
    pub async fn notified_for(&mut self, owner: &str) -> bool {
        let Source::Hub(rx) = &mut self.rx else { return self.notified().await };
        loop {
            if rx.changed().await.is_err() {
                return false;
            }
            if rx.borrow_and_update().1.as_deref().is_none_or(|next| next == owner) {
                return true;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    #[tokio::test]
    async fn notify_wakes_and_idle_hook_runs_once() {
        let idle = Arc::new(AtomicUsize::new(0));
        let hub = {
            let idle = idle.clone();
            NotifyHub::with_idle_hook(move |_| {
                idle.fetch_add(1, Ordering::SeqCst);
            })
        };
        let (mut a, first_a) = hub.subscribe("k");
        let (b, first_b) = hub.subscribe("k");
        assert!(first_a && !first_b);
        hub.notify("k");
        assert!(a.notified().await);
        hub.notify_next("k", Some("someone-else"));
        hub.notify_next("k", Some("me"));
        assert!(a.notified_for("me").await, "woken by the release that names it");
        drop(b);
        assert_eq!(idle.load(Ordering::SeqCst), 0);
        drop(a);
        assert_eq!(idle.load(Ordering::SeqCst), 1);
        assert!(hub.keys().is_empty());
    }
}
