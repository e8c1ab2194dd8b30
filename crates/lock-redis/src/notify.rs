//! Release notifications: one RESP3 pub/sub connection per [`RedisLock`](crate::RedisLock),
//! multiplexing every key its waiters wait on.
//!
//! Two tasks own the connection. The command task runs SUBSCRIBE / UNSUBSCRIBE in the order
//! they were asked for, so an UNSUBSCRIBE of a key that went idle cannot overtake a newer
//! SUBSCRIBE; before unsubscribing it checks that the key really has no waiters left. The push
//! task turns `message` pushes into [`NotifyHub::notify`] and, after a disconnection (messages may
//! have been missed while the connection manager resubscribed), wakes every waiter.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_core::{NotifyHub, Subscription};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Client, ConnectionInfo, ProtocolVersion, PushInfo, PushKind, RedisResult, Value};
use tokio::sync::{mpsc, oneshot};

use crate::keys::KeyLayout;

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
    /// Per subscribed key, the payload of its last release message (fair mode: the owner token
    /// of the waiter at the head of the queue).
    payloads: Payloads,
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
    /// Opens the subscriber connection (RESP3, whatever protocol the command connection uses)
    /// and starts its two tasks; they end when the notifier is dropped.
    pub(crate) async fn start(
        info: &ConnectionInfo,
        layout: Arc<KeyLayout>,
        connection_timeout: Duration,
    ) -> RedisResult<Notifier> {
        let settings = info.redis_settings().clone().set_protocol(ProtocolVersion::RESP3);
        let client = Client::open(info.clone().set_redis_settings(settings))?;
        let (push_tx, push_rx) = mpsc::unbounded_channel();
        let cfg = ConnectionManagerConfig::new()
            .set_push_sender(push_tx)
            .set_automatic_resubscription()
            .set_connection_timeout(Some(connection_timeout))
            .set_response_timeout(Some(connection_timeout))
            .set_max_delay(Duration::from_secs(1));
        let conn = client.get_connection_manager_with_config(cfg).await?;
        let (cmds, cmd_rx) = mpsc::unbounded_channel();
        let weak = cmds.downgrade();
        let hub = NotifyHub::with_idle_hook(move |key| {
            if let Some(tx) = weak.upgrade() {
                let _ = tx.send(Cmd::Unsubscribe(key.to_owned()));
            }
        });
        let payloads = Payloads::default();
        tokio::spawn(command_task(conn, cmd_rx, hub.clone(), layout.clone(), payloads.clone()));
        tokio::spawn(push_task(push_rx, hub.clone(), layout.clone(), payloads.clone()));
        Ok(Notifier { hub, payloads, cmds })
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

    /// The payload of the last release message seen for `key` (while it has waiters).
    pub(crate) fn last_payload(&self, key: &str) -> Option<String> {
        self.payloads.lock().get(key).filter(|p| !p.is_empty()).cloned()
    }

    /// Wakes this client's own waiters of `key` (after a release it made itself).
    pub(crate) fn notify(&self, key: &str) {
        self.hub.notify(key);
    }
}

async fn command_task(
    mut conn: ConnectionManager,
    mut rx: mpsc::UnboundedReceiver<Cmd>,
    hub: NotifyHub,
    layout: Arc<KeyLayout>,
    payloads: Payloads,
) {
    let mut batch = Vec::new();
    while rx.recv_many(&mut batch, 256).await > 0 {
        // Keys with waiters right now: an idle key that got a new waiter meanwhile stays.
        let mut live: Option<HashSet<String>> = None;
        for cmd in batch.drain(..) {
            match cmd {
                Cmd::Subscribe(key, ack) => {
                    payloads.lock().entry(key.clone()).or_default();
                    let _ = ack.send(conn.subscribe(layout.channel(&key)).await);
                }
                Cmd::Unsubscribe(key) => {
                    let live = live.get_or_insert_with(|| hub.keys().into_iter().collect());
                    if live.contains(&key) {
                        continue;
                    }
                    payloads.lock().remove(&key);
                    if let Err(e) = conn.unsubscribe(layout.channel(&key)).await {
                        tracing::debug!(error = %e, "redis unsubscribe failed");
                    }
                }
            }
        }
    }
}

async fn push_task(
    mut rx: mpsc::UnboundedReceiver<PushInfo>,
    hub: NotifyHub,
    layout: Arc<KeyLayout>,
    payloads: Payloads,
) {
    let mut reconnecting = false;
    while let Some(push) = rx.recv().await {
        match push.kind {
            PushKind::Message => {
                if let Some(Value::BulkString(ch)) = push.data.first()
                    && let Ok(ch) = std::str::from_utf8(ch)
                    && let Some(key) = layout.key_of_channel(ch)
                {
                    let payload = match push.data.get(1) {
                        Some(Value::BulkString(p)) => String::from_utf8_lossy(p).into_owned(),
                        _ => String::new(),
                    };
                    // Only keys subscribed right now have an entry, so nothing piles up.
                    if let Some(slot) = payloads.lock().get_mut(&key) {
                        *slot = payload;
                    }
                    hub.notify(&key);
                }
            }
            PushKind::Disconnection => {
                tracing::debug!("redis subscriber disconnected; waking every waiter");
                payloads.lock().values_mut().for_each(String::clear);
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

#[derive(Debug, Clone, Default)]
struct Payloads(Arc<Mutex<HashMap<String, String>>>);

impl Payloads {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, String>> {
        // Single inserts and removes only: a poisoned map is still consistent.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}
