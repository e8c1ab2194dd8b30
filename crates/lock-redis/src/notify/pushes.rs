//! What the subscriber connection does with each push it reads, where it reads it (it must
//! not block): a hand-over wakes its one waiter, a release the next, a disconnection or a
//! dropped subscription every waiter of the key.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use lock_core::backend::NotifyHub;
use redis::{PushInfo, PushKind, Value};
use tokio::sync::mpsc;

use super::{Cmd, Subscribed};
use crate::handoffs::{self, Handoffs};
use crate::keys::KeyLayout;

/// Wakes `key`'s waiters after a release: the waiter `next`, or for `None` every waiter, but
/// one in the interop modes (`interop`), whose waiters keep no queue: the herd would find the
/// key taken by the first.
pub(super) fn wake(hub: &NotifyHub, key: &str, next: Option<&str>, interop: bool) {
    match next {
        None if interop => hub.notify_one(key),
        next => hub.notify_next(key, next),
    }
}

/// What the subscriber connection does with each push it reads (it must not block).
pub(super) struct Pushes {
    pub(super) hub: NotifyHub,
    pub(super) layout: Arc<KeyLayout>,
    /// This client's inbox channel.
    pub(super) inbox: String,
    /// Where a hand-over to one of this client's waiters is noted before it wakes.
    pub(super) handoffs: Arc<Handoffs>,
    /// A disconnection was seen and the resubscription not yet.
    pub(super) reconnecting: AtomicBool,
    /// Keys subscribed on the server, to tell a server's `sunsubscribe` from our own.
    pub(super) subscribed: Subscribed,
    /// The command task, for a resubscription.
    pub(super) cmds: mpsc::WeakUnboundedSender<Cmd>,
}

impl Pushes {
    fn is_inbox(&self, push: &PushInfo) -> bool {
        matches!(push.data.first(), Some(Value::BulkString(ch)) if ch.as_slice() == self.inbox.as_bytes())
    }

    pub(super) fn handle(&self, push: PushInfo) {
        match push.kind {
            PushKind::Message if self.is_inbox(&push) => {
                // A lock handed to one of our waiters: `token:fence:window:deadline:lock`.
                if let Some(Value::BulkString(p)) = push.data.get(1)
                    && let Ok(p) = std::str::from_utf8(p)
                    && let Some((waiter, handed, Some(lock))) = handoffs::parse(p)
                    && let Some(key) = self.layout.key_of_lock(lock)
                {
                    self.handoffs.handed(&key, waiter, handed);
                    self.hub.notify_next(&key, p.get(..32));
                }
            }
            PushKind::Message | PushKind::SMessage => {
                if let Some(Value::BulkString(ch)) = push.data.first()
                    && let Ok(ch) = std::str::from_utf8(ch)
                    && let Some(key) = self.layout.key_of_channel(ch)
                {
                    // The payload names the waiter the lock or a permit was handed to
                    // (`token:fence:window:deadline[/slot]`), or a waiter to wake (its bare
                    // token); empty names nobody.
                    let payload = match push.data.get(1) {
                        Some(Value::BulkString(p)) => std::str::from_utf8(p).ok(),
                        _ => None,
                    };
                    // Every client subscribed to the key hears it: noted only by the waiter's.
                    let next = payload.and_then(|p| {
                        if p.len() == handoffs::TOKEN_LEN {
                            return Some(p);
                        }
                        let (waiter, handed, _) = handoffs::parse(p)?;
                        self.handoffs.handed_if_waiting(&key, waiter, handed);
                        p.get(..handoffs::TOKEN_LEN)
                    });
                    wake(&self.hub, &key, next, self.layout.is_interop());
                }
            }
            PushKind::Disconnection => {
                tracing::debug!("redis subscriber disconnected; waking every waiter");
                self.hub.notify_all();
                self.reconnecting.store(true, Ordering::SeqCst);
            }
            PushKind::SUnsubscribe => {
                // Ours only after the key left `subscribed`; else the server dropped it (its
                // slot moved): wake the key's waiters and subscribe again where it lives now.
                if let Some(Value::BulkString(ch)) = push.data.first()
                    && let Ok(ch) = std::str::from_utf8(ch)
                    && let Some(key) = self.layout.key_of_channel(ch)
                    && self.subscribed.lock().contains(&key)
                {
                    self.hub.notify_next(&key, None);
                    if let Some(tx) = self.cmds.upgrade() {
                        let _ = tx.send(Cmd::Resubscribe(key));
                    }
                }
            }
            PushKind::Subscribe | PushKind::SSubscribe if self.reconnecting.swap(false, Ordering::SeqCst) => {
                // Resubscribed after a reconnect: releases in the gap were not seen.
                self.hub.notify_all();
            }
            _ => {}
        }
    }
}
