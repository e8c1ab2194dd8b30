//! Release notifications: one RESP3 pub/sub connection per [`RedisLock`](crate::RedisLock),
//! multiplexing every key its waiters wait on.
//!
//! The command task runs SUBSCRIBE / UNSUBSCRIBE in the order they were asked for, so an
//! UNSUBSCRIBE of a key that went idle cannot overtake a newer SUBSCRIBE. A key whose last
//! waiter left stays subscribed for a while ([`LINGER`]): a client that waits on a busy key
//! again and again then subscribes once, not once per acquisition (two round trips saved each
//! time); before unsubscribing, the task checks that the key really has no waiters left. Pushes are handled where the connection
//! reads them, without a task in between (a hop less on every hand-over): `message` pushes
//! become [`NotifyHub::notify_next`] (the payload names the waiter the lock was handed to, so
//! only that one wakes) and, after a disconnection (messages may have been missed while the
//! connection manager resubscribed), every waiter is woken.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use lock_core::backend::{Mutex, NotifyHub, Subscription};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Client, ConnectionInfo, ProtocolVersion, PushInfo, PushKind, RedisResult, Value};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::keys::KeyLayout;

/// Commands the command task takes at once: one look at the hub's live keys serves the whole
/// batch of unsubscriptions, and a burst of waiters leaving costs one lock of the hub.
const COMMAND_BATCH: usize = 256;
/// How long a key stays subscribed on the server after its last waiter left.
const LINGER: Duration = Duration::from_secs(3);

/// Keys subscribed on the server (waited on, or lingering), shared by the waiters and the
/// command task.
type Subscribed = Arc<Mutex<HashSet<String>>>;

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
    subscribed: Subscribed,
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
        inbox: String,
        cfg: ConnectionManagerConfig,
    ) -> RedisResult<Notifier> {
        let settings = info.redis_settings().clone().set_protocol(ProtocolVersion::RESP3);
        let client = Client::open(info.clone().set_redis_settings(settings))?;
        let (cmds, cmd_rx) = mpsc::unbounded_channel();
        let weak = cmds.downgrade();
        let hub = NotifyHub::with_idle_hook(move |key| {
            if let Some(tx) = weak.upgrade() {
                let _ = tx.send(Cmd::Unsubscribe(key.to_owned()));
            }
        });
        let pushes = Pushes {
            hub: hub.clone(),
            layout: layout.clone(),
            inbox: inbox.clone(),
            reconnecting: AtomicBool::new(false),
        };
        let cfg = cfg
            .set_push_sender(move |push: PushInfo| -> Result<(), ()> {
                pushes.handle(push);
                Ok(())
            })
            .set_automatic_resubscription();
        let mut conn = client.get_connection_manager_with_config(cfg).await?;
        // Hand-overs to this client's waiters come here, whatever the key.
        conn.subscribe(&inbox).await?;
        let subscribed = Subscribed::default();
        tokio::spawn(command_task(conn, cmd_rx, hub.clone(), layout, subscribed.clone()));
        Ok(Notifier { hub, cmds, subscribed })
    }

    /// Registers a waiter on `key`, subscribing on the server first if it is the key's first
    /// and the key is not still subscribed from an earlier waiter.
    pub(crate) async fn subscribe(&self, key: &str) -> RedisResult<Subscription> {
        let (sub, first) = self.hub.subscribe(key);
        // Checked after registering in the hub: the command task unsubscribes a lingering key
        // only if the hub has no waiter for it, under the same lock.
        if first && !self.subscribed.lock().contains(key) {
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
    subscribed: Subscribed,
) {
    let mut batch = Vec::new();
    // Keys whose last waiter left, and since when.
    let mut idle: HashMap<String, Instant> = HashMap::new();
    let mut sweep = tokio::time::interval(LINGER);
    sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            n = rx.recv_many(&mut batch, COMMAND_BATCH) => if n == 0 { return },
            _ = sweep.tick(), if !idle.is_empty() => {
                let now = Instant::now();
                let due: Vec<String> = idle.iter().filter(|(_, t)| now - **t >= LINGER).map(|(k, _)| k.clone()).collect();
                let mut gone = Vec::new();
                {
                    let mut subscribed = subscribed.lock();
                    // Keys with waiters right now stay: they got a new waiter meanwhile.
                    let live: HashSet<String> = hub.keys().into_iter().collect();
                    for key in due {
                        idle.remove(&key);
                        if !live.contains(&key) && subscribed.remove(&key) {
                            gone.push(key);
                        }
                    }
                }
                for key in gone {
                    if let Err(e) = conn.unsubscribe(layout.channel(&key)).await {
                        tracing::debug!(error = %e, "redis unsubscribe failed");
                    }
                }
                continue;
            }
        }
        for cmd in batch.drain(..) {
            match cmd {
                Cmd::Subscribe(key, ack) => {
                    if subscribed.lock().contains(&key) {
                        let _ = ack.send(Ok(()));
                        continue;
                    }
                    let r = conn.subscribe(layout.channel(&key)).await;
                    if r.is_ok() {
                        subscribed.lock().insert(key);
                    }
                    let _ = ack.send(r);
                }
                Cmd::Unsubscribe(key) => {
                    idle.insert(key, Instant::now());
                }
            }
        }
    }
}

/// What the subscriber connection does with each push it reads (it must not block).
struct Pushes {
    hub: NotifyHub,
    layout: Arc<KeyLayout>,
    /// This client's inbox channel.
    inbox: String,
    /// A disconnection was seen and the resubscription not yet.
    reconnecting: AtomicBool,
}

impl Pushes {
    fn is_inbox(&self, push: &PushInfo) -> bool {
        matches!(push.data.first(), Some(Value::BulkString(ch)) if ch.as_slice() == self.inbox.as_bytes())
    }

    fn handle(&self, push: PushInfo) {
        match push.kind {
            PushKind::Message if self.is_inbox(&push) => {
                // A lock handed to one of our waiters: its token (32 hex digits), then the
                // lock's Redis name.
                if let Some(Value::BulkString(p)) = push.data.get(1)
                    && let Ok(p) = std::str::from_utf8(p)
                    && let (Some(token), Some(lock)) = (p.get(..32), p.get(32..))
                    && let Some(key) = self.layout.key_of_lock(lock)
                {
                    self.hub.notify_next(&key, Some(token));
                }
            }
            PushKind::Message => {
                if let Some(Value::BulkString(ch)) = push.data.first()
                    && let Ok(ch) = std::str::from_utf8(ch)
                    && let Some(key) = self.layout.key_of_channel(ch)
                {
                    // The payload names the waiter the lock was handed to; empty names nobody.
                    let next = match push.data.get(1) {
                        Some(Value::BulkString(p)) if !p.is_empty() => std::str::from_utf8(p).ok(),
                        _ => None,
                    };
                    self.hub.notify_next(&key, next);
                }
            }
            PushKind::Disconnection => {
                tracing::debug!("redis subscriber disconnected; waking every waiter");
                self.hub.notify_all();
                self.reconnecting.store(true, Ordering::SeqCst);
            }
            PushKind::Subscribe if self.reconnecting.swap(false, Ordering::SeqCst) => {
                // Resubscribed after a reconnect: releases in the gap were not seen.
                self.hub.notify_all();
            }
            _ => {}
        }
    }
}
