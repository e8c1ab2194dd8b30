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
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use lock_core::backend::{Mutex, NotifyHub, Subscription};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::{Client, ConnectionInfo, ProtocolVersion, PushInfo, RedisResult};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

use crate::handoffs::Handoffs;
use crate::keys::KeyLayout;

mod pushes;

use pushes::{Pushes, wake};

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
    /// A key the server unsubscribed us from while it still had waiters.
    Resubscribe(String),
    /// The user key whose last waiter left.
    Unsubscribe(String),
}

/// The shared subscriber of one lock client.
#[derive(Debug)]
pub(crate) struct Notifier {
    hub: NotifyHub,
    cmds: mpsc::UnboundedSender<Cmd>,
    subscribed: Subscribed,
    /// Whose names: an interop mode's release wakes one waiter.
    interop: bool,
}

impl std::fmt::Debug for Cmd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Cmd::Subscribe(k, _) => write!(f, "Subscribe({k})"),
            Cmd::Unsubscribe(k) => write!(f, "Unsubscribe({k})"),
            Cmd::Resubscribe(k) => write!(f, "Resubscribe({k})"),
        }
    }
}

/// Where the subscriber connects.
#[allow(clippy::large_enum_variant)] // one per client, moved once
pub(crate) enum Source {
    /// One server (its address).
    Single(ConnectionInfo),
    /// The primary the sentinels name, followed when it changes.
    Sentinel(watch::Receiver<ConnectionInfo>),
    /// A cluster: `SSUBSCRIBE` on the node that owns each lock's slot (the builder is set up with
    /// the nodes, credentials and timeouts; RESP3 and the push sender are added here).
    Cluster(Box<ClusterClientBuilder>),
}

/// The subscriber connection.
enum SubConn {
    /// `SUBSCRIBE` / `UNSUBSCRIBE` through a connection manager (it resubscribes after a
    /// reconnection).
    Manager(ConnectionManager),
    /// `SSUBSCRIBE` / `SUNSUBSCRIBE` through a cluster connection (it resubscribes each
    /// channel on the node owning its slot after a reconnection or a topology change).
    Cluster(ClusterConnection),
}

impl SubConn {
    async fn subscribe(&mut self, channel: &str) -> RedisResult<()> {
        match self {
            SubConn::Manager(c) => c.subscribe(channel).await,
            SubConn::Cluster(c) => c.ssubscribe(channel).await,
        }
    }

    async fn unsubscribe(&mut self, channel: &str) -> RedisResult<()> {
        match self {
            SubConn::Manager(c) => c.unsubscribe(channel).await,
            SubConn::Cluster(c) => c.sunsubscribe(channel).await,
        }
    }
}

/// A RESP3 connection manager to `info` whose pushes go to `pushes`.
async fn manager(
    info: &ConnectionInfo,
    cfg: ConnectionManagerConfig,
    pushes: Arc<Pushes>,
) -> RedisResult<ConnectionManager> {
    let settings = info.redis_settings().clone().set_protocol(ProtocolVersion::RESP3);
    let client = Client::open(info.clone().set_redis_settings(settings))?;
    let cfg = cfg
        .set_push_sender(move |push: PushInfo| -> Result<(), ()> {
            pushes.handle(push);
            Ok(())
        })
        .set_automatic_resubscription();
    client.get_connection_manager_with_config(cfg).await
}

impl Notifier {
    /// Opens the subscriber connection (RESP3, whatever protocol the command connection uses;
    /// `cfg` sets its timeouts) and starts its two tasks; they end when the notifier is dropped.
    /// `inbox` is '' on a cluster (the hand-over is published on the lock's own channel).
    pub(crate) async fn start(
        source: Source,
        layout: Arc<KeyLayout>,
        inbox: String,
        handoffs: Arc<Handoffs>,
        cfg: ConnectionManagerConfig,
    ) -> RedisResult<Notifier> {
        let (cmds, cmd_rx) = mpsc::unbounded_channel();
        let weak = cmds.downgrade();
        let hub = NotifyHub::with_idle_hook(move |key| {
            if let Some(tx) = weak.upgrade() {
                let _ = tx.send(Cmd::Unsubscribe(key.to_owned()));
            }
        });
        let subscribed = Subscribed::default();
        let pushes = Arc::new(Pushes {
            hub: hub.clone(),
            layout: layout.clone(),
            inbox: inbox.clone(),
            handoffs,
            reconnecting: AtomicBool::new(false),
            subscribed: subscribed.clone(),
            cmds: cmds.downgrade(),
        });
        let (mut conn, follow) = match source {
            Source::Single(info) => {
                (SubConn::Manager(manager(&info, cfg.clone(), pushes.clone()).await?), None)
            }
            Source::Sentinel(mut primary) => {
                let info = primary.borrow_and_update().clone();
                (SubConn::Manager(manager(&info, cfg.clone(), pushes.clone()).await?), Some(primary))
            }
            Source::Cluster(builder) => {
                let p = pushes.clone();
                let client = (*builder)
                    .use_protocol(ProtocolVersion::RESP3)
                    .push_sender(move |push: PushInfo| -> Result<(), ()> {
                        p.handle(push);
                        Ok(())
                    })
                    .build()?;
                (SubConn::Cluster(client.get_async_connection().await?), None)
            }
        };
        // Hand-overs to this client's waiters come here, whatever the key.
        if !inbox.is_empty() {
            conn.subscribe(&inbox).await?;
        }
        let interop = layout.is_interop();
        let task =
            CommandTask { hub: hub.clone(), layout, subscribed: subscribed.clone(), inbox, cfg, pushes };
        tokio::spawn(task.run(conn, cmd_rx, follow));
        Ok(Notifier { hub, cmds, subscribed, interop })
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

    /// Whether `key` is subscribed on the server (waited on, or lingering): [`subscribe`]
    /// (Self::subscribe) then sends nothing, and a release from now on is heard.
    pub(crate) fn listening(&self, key: &str) -> bool {
        self.subscribed.lock().contains(key)
    }

    /// Wakes this client's own waiters of `key` after a release it made itself: the waiter
    /// `next` in the fair queue, or for `None` every waiter (one in the interop modes, whose
    /// waiters keep no queue: the herd would find the key taken by the first).
    pub(crate) fn notify_next(&self, key: &str, next: Option<&str>) {
        wake(&self.hub, key, next, self.interop);
    }
}

/// The task that sends SUBSCRIBE / UNSUBSCRIBE, in the order they were asked for.
struct CommandTask {
    hub: NotifyHub,
    layout: Arc<KeyLayout>,
    subscribed: Subscribed,
    inbox: String,
    cfg: ConnectionManagerConfig,
    pushes: Arc<Pushes>,
}

impl CommandTask {
    async fn run(
        self,
        mut conn: SubConn,
        mut rx: mpsc::UnboundedReceiver<Cmd>,
        mut follow: Option<watch::Receiver<ConnectionInfo>>,
    ) {
        let (hub, layout, subscribed) = (&self.hub, &self.layout, &self.subscribed);
        let mut batch = Vec::new();
        // Keys whose last waiter left, and since when.
        let mut idle: HashMap<String, Instant> = HashMap::new();
        let mut sweep = tokio::time::interval(LINGER);
        sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                n = rx.recv_many(&mut batch, COMMAND_BATCH) => if n == 0 { return },
                changed = async { follow.as_mut()?.changed().await.ok() }, if follow.is_some() => {
                    match changed {
                        Some(()) => {
                            let info = follow.as_mut().map(|f| f.borrow_and_update().clone());
                            if let Some(info) = info {
                                self.follow(&mut conn, &info).await;
                            }
                        }
                        None => follow = None,
                    }
                    continue;
                }
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
                        if let Err(e) = conn.unsubscribe(&layout.channel(&key)).await {
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
                        let r = conn.subscribe(&layout.channel(&key)).await;
                        if r.is_ok() {
                            subscribed.lock().insert(key);
                        }
                        let _ = ack.send(r);
                    }
                    Cmd::Resubscribe(key) => {
                        // The server dropped a subscription the waiters still need (a cluster slot
                        // moved to another node); the cluster connection routes it anew.
                        if subscribed.lock().contains(&key)
                            && let Err(e) = conn.subscribe(&layout.channel(&key)).await
                        {
                            tracing::debug!(error = %e, "redis resubscribe failed");
                        }
                    }
                    Cmd::Unsubscribe(key) => {
                        idle.insert(key, Instant::now());
                    }
                }
            }
        }
    }

    /// Sentinel: the primary moved to `info`. Subscribes there (inbox and every subscribed key)
    /// and wakes every waiter, since releases on the new primary may already have been missed.
    /// On failure the old connection stays and the next change tries again; waiters then fall
    /// back to their heartbeat.
    async fn follow(&self, conn: &mut SubConn, info: &ConnectionInfo) {
        let mut next = match manager(info, self.cfg.clone(), self.pushes.clone()).await {
            Ok(m) => SubConn::Manager(m),
            Err(e) => {
                tracing::debug!(error = %e, "redis subscriber: new primary unreachable");
                self.hub.notify_all();
                return;
            }
        };
        let mut channels: Vec<String> =
            self.subscribed.lock().iter().map(|k| self.layout.channel(k)).collect();
        if !self.inbox.is_empty() {
            channels.push(self.inbox.clone());
        }
        for ch in &channels {
            if let Err(e) = next.subscribe(ch).await {
                tracing::debug!(error = %e, "redis subscriber: subscribing on the new primary failed");
            }
        }
        *conn = next;
        self.hub.notify_all();
    }
}
