//! How a waiter waits on its [`Subscription`]: for any release, for a single wake-up, or for
//! one that names it; and what it tells the hub when a wait ends with the lock or without it.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio::sync::{Notify, watch};

#[cfg(doc)]
use super::NotifyHub;
use super::{Back, Named, Source, Subscription};

impl Subscription {
    /// A subscription fed by the backend's own `watch` channel (backends that do not use
    /// [`NotifyHub`]). Send on the channel to wake the waiter.
    pub fn from_watch(rx: watch::Receiver<u64>) -> Self {
        Subscription { rx: Source::Plain(rx), one: None, keep: None, woken: false, leave: None }
    }

    /// This subscription, keeping `keep` alive until it is dropped (the source that feeds it,
    /// shared by the key's waiters and stopped with the last).
    pub fn keeping(mut self, keep: impl Send + Sync + 'static) -> Self {
        self.keep = Some(Box::new(keep));
        self
    }

    /// Wait for the next release notification that names nobody, or a single wake-up meant
    /// for this waiter. Returns `false` if the source is gone (then the caller falls back to
    /// polling).
    pub async fn notified(&mut self) -> bool {
        // Waiting again: the attempt the last single wake-up led to was refused.
        self.back(Back::Refused);
        self.wait(None).await
    }

    /// A broadcast, a single wake-up (noted in `woken`) or, with `named`, a wake-up naming
    /// this waiter.
    async fn wait(&mut self, named: Option<Arc<Notify>>) -> bool {
        match (&mut self.rx, &self.one) {
            (Source::Hub(rx), Some(one)) => {
                let one = one.clone();
                let named = async {
                    match named {
                        Some(n) => n.notified().await,
                        None => std::future::pending().await,
                    }
                };
                let (alive, single) = tokio::select! {
                    // The first ready branch, not a random one: what a random pick could choose, the
                    // same every run, so a simulated run replays its seed (`history::sim`).
                    biased;
                    changed = rx.changed() => (changed.is_ok(), false),
                    () = one.notify.notified() => (true, true),
                    () = named => (true, false),
                };
                self.woken = single;
                alive
            }
            (Source::Hub(rx), _) => rx.changed().await.is_ok(),
            (Source::Plain(rx), _) => rx.changed().await.is_ok(),
        }
    }

    /// [`Subscription::notified`], for a waiter that tries as `owner`: a single wake-up it gets
    /// is noted as its own, so that a store can let it try first
    /// (see [`NotifyHub::woken_other`]). Once the store asked for it
    /// ([`NotifyHub::wake_by_name`]), a release naming `owner` ([`NotifyHub::notify_next`])
    /// wakes it too.
    pub async fn notified_as(&mut self, owner: &str) -> bool {
        self.back(Back::Refused);
        let by_name = self.one.as_ref().is_some_and(|one| one.by_name.load(Ordering::Relaxed));
        let named = match by_name.then(|| self.named(owner)) {
            Some(Named::Kept) => return true,
            Some(Named::Wait(n)) => Some(n),
            Some(Named::Unnamed) | None => None,
        };
        let alive = self.wait(named).await;
        if self.woken
            && let Some(leave) = &self.leave
        {
            leave.hub.claim(&leave.key, owner);
        }
        alive
    }

    /// The waiter took the lock exclusively: a single wake-up it got is used up, not passed on
    /// (its own release wakes the next). A shared hold leaves room for more, so a waiter that
    /// took one does not call this and the wake-up goes on to the next waiter.
    pub fn granted(&mut self) {
        self.back(Back::Taken);
    }

    /// Wait for the next release notification that names `owner` as next in line, or names
    /// nobody. Returns `false` if the source is gone.
    pub async fn notified_for(&mut self, owner: &str) -> bool {
        let notify = match self.named(owner) {
            Named::Kept => return true,
            Named::Wait(n) => n,
            Named::Unnamed => return self.notified().await,
        };
        let Source::Hub(rx) = &mut self.rx else { return self.notified().await };
        tokio::select! {
            // The first ready branch, not a random one: what a random pick could choose, the
            // same every run, so a simulated run replays its seed (`history::sim`).
            biased;
            changed = rx.changed() => changed.is_ok(),
            () = notify.notified() => true,
        }
    }
}
