//! Release notifications: one RESP3 pub/sub connection per [`RedisLock`](crate::RedisLock),
//! multiplexing every key its waiters wait on.
//!
//! Two tasks own the connection. The command task runs SUBSCRIBE / UNSUBSCRIBE in the order
//! they were asked for, so an UNSUBSCRIBE of a key that went idle cannot overtake a newer
//! SUBSCRIBE; before unsubscribing it checks that the key really has no waiters left. The push
//! task turns `message` pushes into [`NotifyHub::notify_next`] (the payload names the fair
//! queue's next waiter, so only that one wakes) and, after a disconnection (messages may have
//! been missed while the connection manager resubscribed), wakes every waiter.

use std::collections::HashSet;
use std::sync::Arc;

use lock_core::backend::{NotifyHub, Subscription};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Client, ConnectionInfo, ProtocolVersion, PushInfo, PushKind, RedisResult, Value};
use tokio::sync::{mpsc, oneshot};

use crate::keys::KeyLayout;

/// Commands the command task takes at once: one look at the hub's live keys serves the whole
/// batch of unsubscriptions, and a burst of waiters leaving costs one lock of the hub.
const COMMAND_BATCH: usize = 256;

enum Cmd {
    /// The user key that got its first waiter.
    Subscribe(String, oneshot::Sender<RedisResult<()>>),
    /// The user key whose last waiter left.
    Unsubscribe(String),
}

/// The shared subscriber of one lock client.
#[derive(Debug)]
pub(crate) struct Notifier {
    hub: NotifyHub,
    cmds: mpsc::UnboundedSender<Cmd>,
}

impl std::fmt::Debug for Cmd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Cmd::Subscribe(k, _) => write!(f, "Subscribe({k})"),
            Cmd::Unsubscribe(k) => write!(f, "Unsubscribe({k})"),
        }
    }
}

impl Notifier {
    /// Opens the subscriber connection (RESP3, whatever protocol the command connection uses;
    /// `cfg` sets its timeouts) and starts its two tasks; they end when the notifier is dropped.
    pub(crate) async fn start(
        info: &ConnectionInfo,
        layout: Arc<KeyLayout>,
        cfg: ConnectionManagerConfig,
    ) -> RedisResult<Notifier> {
        let settings = info.redis_settings().clone().set_protocol(ProtocolVersion::RESP3);
        let client = Client::open(info.clone().set_redis_settings(settings))?;
        let (push_tx, push_rx) = mpsc::unbounded_channel();
        let cfg = cfg.set_push_sender(push_tx).set_automatic_resubscription();
        let conn = client.get_connection_manager_with_config(cfg).await?;
        let (cmds, cmd_rx) = mpsc::unbounded_channel();
        let weak = cmds.downgrade();
        let hub = NotifyHub::with_idle_hook(move |key| {
            if let Some(tx) = weak.upgrade() {
                let _ = tx.send(Cmd::Unsubscribe(key.to_owned()));
            }
        });
        tokio::spawn(command_task(conn, cmd_rx, hub.clone(), layout.clone()));
        tokio::spawn(push_task(push_rx, hub.clone(), layout));
        Ok(Notifier { hub, cmds })
    }

    /// Registers a waiter on `key`, subscribing on the server first if it is the key's first.
    pub(crate) async fn subscribe(&self, key: &str) -> RedisResult<Subscription> {
        let (sub, first) = self.hub.subscribe(key);
        if first {
            let (tx, rx) = oneshot::channel();
            let gone = || redis::RedisError::from((redis::ErrorKind::Io, "subscriber task ended"));
            self.cmds.send(Cmd::Subscribe(key.to_owned(), tx)).map_err(|_| gone())?;
            rx.await.map_err(|_| gone())??;
        }
        Ok(sub)
    }

    /// Wakes this client's own waiters of `key` after a release it made itself: the waiter
    /// `next` in the fair queue, or every waiter for `None`.
    pub(crate) fn notify_next(&self, key: &str, next: Option<&str>) {
        self.hub.notify_next(key, next);
    }
}

async fn command_task(
    mut conn: ConnectionManager,
    mut rx: mpsc::UnboundedReceiver<Cmd>,
    hub: NotifyHub,
    layout: Arc<KeyLayout>,
) {
    let mut batch = Vec::new();
    while rx.recv_many(&mut batch, COMMAND_BATCH).await > 0 {
        // Keys with waiters right now: an idle key that got a new waiter meanwhile stays.
        let mut live: Option<HashSet<String>> = None;
        for cmd in batch.drain(..) {
            match cmd {
                Cmd::Subscribe(key, ack) => {
                    let _ = ack.send(conn.subscribe(layout.channel(&key)).await);
                }
                Cmd::Unsubscribe(key) => {
                    let live = live.get_or_insert_with(|| hub.keys().into_iter().collect());
                    if live.contains(&key) {
                        continue;
                    }
                    if let Err(e) = conn.unsubscribe(layout.channel(&key)).await {
                        tracing::debug!(error = %e, "redis unsubscribe failed");
                    }
                }
            }
        }
    }
}

async fn push_task(mut rx: mpsc::UnboundedReceiver<PushInfo>, hub: NotifyHub, layout: Arc<KeyLayout>) {
    let mut reconnecting = false;
    while let Some(push) = rx.recv().await {
        match push.kind {
            PushKind::Message => {
                if let Some(Value::BulkString(ch)) = push.data.first()
                    && let Ok(ch) = std::str::from_utf8(ch)
                    && let Some(key) = layout.key_of_channel(ch)
                {
                    // Fair mode names the next waiter; an empty payload names nobody.
                    let next = match push.data.get(1) {
                        Some(Value::BulkString(p)) if !p.is_empty() => std::str::from_utf8(p).ok(),
                        _ => None,
                    };
                    hub.notify_next(&key, next);
                }
            }
            PushKind::Disconnection => {
                tracing::debug!("redis subscriber disconnected; waking every waiter");
                hub.notify_all();
                reconnecting = true;
            }
            PushKind::Subscribe if reconnecting => {
                // Resubscribed after a reconnect: releases in the gap were not seen.
                reconnecting = false;
                hub.notify_all();
            }
            _ => {}
        }
    }
}
