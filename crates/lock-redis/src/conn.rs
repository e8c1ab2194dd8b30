//! How lock commands reach Redis: one server, a Redis Cluster (every command routed to the
//! node owning its key's slot), or the primary a set of Sentinels names (followed across a
//! failover).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use lock_core::backend::Mutex;
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::sentinel::SentinelClient;
use redis::{
    Client, Cmd, ConnectionInfo, ErrorKind, FromRedisValue, Pipeline, RedisError, RedisFuture, RedisResult,
    Value,
};
use tokio::sync::watch;

/// The connection lock commands go through: a connection manager (one server), a cluster
/// connection, or a Sentinel-resolved primary. Clones share the connection. It implements
/// [`redis::aio::ConnectionLike`], so any `redis` command can be sent through it (the tests
/// use it to find and kill the lock connection on the server).
#[derive(Clone)]
pub struct RedisConnection {
    kind: Kind,
    /// Feature `testing`: every command is sent twice and the second answer returned, as a
    /// driver that resends a request whose answer it did not get (a retry after a timeout, a
    /// resend after a failover) does when the first one ran after all.
    #[cfg(feature = "testing")]
    resend: Arc<std::sync::atomic::AtomicBool>,
}

#[derive(Clone)]
pub(crate) enum Kind {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
    Sentinel(SentinelConn),
}

impl fmt::Debug for RedisConnection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self.kind {
            Kind::Single(_) => "RedisConnection::Single",
            Kind::Cluster(_) => "RedisConnection::Cluster",
            Kind::Sentinel(_) => "RedisConnection::Sentinel",
        })
    }
}

impl RedisConnection {
    pub(crate) fn new(kind: Kind) -> Self {
        RedisConnection {
            kind,
            #[cfg(feature = "testing")]
            resend: Arc::default(),
        }
    }

    /// Sends every command twice from now on (`true`), or once again. Feature `testing`: the
    /// tests show with it that every script is idempotent per attempt.
    #[cfg(feature = "testing")]
    pub fn resend_every_command(&self, on: bool) {
        self.resend.store(on, std::sync::atomic::Ordering::SeqCst);
    }

    fn send<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match &mut self.kind {
            Kind::Single(c) => c.req_packed_command(cmd),
            Kind::Cluster(c) => c.req_packed_command(cmd),
            Kind::Sentinel(s) => Box::pin(s.command(cmd)),
        }
    }

    /// True on a cluster: scripts publish with `SPUBLISH` (sharded pub/sub, on the node that
    /// owns the lock's slot) instead of `PUBLISH`.
    pub(crate) fn sharded(&self) -> bool {
        matches!(self.kind, Kind::Cluster(_))
    }

    /// Sends `cmd`, which names no key, to the server of `key`: on a cluster the master that
    /// owns its slot, elsewhere the one server or primary. For `WAIT` after a lock's script:
    /// on a cluster a keyless command would go to any node, whose replicas never saw the
    /// script's writes.
    pub(crate) async fn query_at_key<T: FromRedisValue>(&mut self, cmd: &Cmd, key: &str) -> RedisResult<T> {
        match &mut self.kind {
            Kind::Cluster(c) => {
                let node = SingleNodeRoutingInfo::SpecificNode(Route::with_key(key, SlotAddr::Master));
                let v = c.route_command(cmd.clone(), RoutingInfo::SingleNode(node)).await?;
                Ok(redis::from_redis_value(v)?)
            }
            _ => cmd.query_async(self).await,
        }
    }
}

impl ConnectionLike for RedisConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        #[cfg(feature = "testing")]
        if self.resend.load(std::sync::atomic::Ordering::SeqCst) {
            return Box::pin(async move {
                // The first answer is the one a resending driver never saw.
                let _ = self.send(cmd).await;
                self.send(cmd).await
            });
        }
        self.send(cmd)
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match &mut self.kind {
            Kind::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Kind::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
            Kind::Sentinel(s) => Box::pin(s.commands(pipeline, offset, count)),
        }
    }

    fn get_db(&self) -> i64 {
        match &self.kind {
            Kind::Single(c) => c.get_db(),
            Kind::Cluster(c) => c.get_db(),
            Kind::Sentinel(s) => s.current().0.get_db(),
        }
    }
}

/// A connection to the primary the sentinels name. Commands go through a connection manager to
/// the primary last resolved; an error that says the primary is gone (connection refused or
/// dropped, a timeout, `READONLY` from a demoted primary, `MASTERDOWN`) makes the sentinels be
/// asked again, and a new primary gets a new connection manager. If the primary did change,
/// the command is sent once more, to the new one: whatever the old primary did with it is
/// not on the new one, except what it replicated before it died (the scripts are written for
/// that: a repeated release or renewal finds its own hold or nothing). If it did not change,
/// the caller sees the temporary error.
#[derive(Clone)]
pub(crate) struct SentinelConn {
    shared: Arc<SentinelShared>,
}

struct SentinelShared {
    /// One resolution at a time; a command that failed on an older primary than the current
    /// one does not resolve again.
    sentinel: tokio::sync::Mutex<SentinelClient>,
    /// The primary's connection and its generation.
    current: Mutex<(ConnectionManager, u64)>,
    /// The primary's address, for the subscriber (which follows it) and `identity`.
    primary: watch::Sender<ConnectionInfo>,
    cfg: ConnectionManagerConfig,
    /// Bounds one resolution (the sentinels' answer and the new primary's first connection).
    timeout: Duration,
}

impl SentinelConn {
    /// Resolves the primary through `sentinel` and connects to it.
    pub(crate) async fn connect(
        mut sentinel: SentinelClient,
        cfg: ConnectionManagerConfig,
        timeout: Duration,
    ) -> RedisResult<(SentinelConn, Client)> {
        let client = within(timeout, sentinel.async_get_client()).await?;
        let manager = within(timeout, client.get_connection_manager_with_config(cfg.clone())).await?;
        let (primary, _) = watch::channel(client.get_connection_info().clone());
        let shared = SentinelShared {
            sentinel: tokio::sync::Mutex::new(sentinel),
            current: Mutex::new((manager, 0)),
            primary,
            cfg,
            timeout,
        };
        Ok((SentinelConn { shared: Arc::new(shared) }, client))
    }

    /// The current primary's address, and its changes.
    pub(crate) fn primary(&self) -> watch::Receiver<ConnectionInfo> {
        self.shared.primary.subscribe()
    }

    fn current(&self) -> (ConnectionManager, u64) {
        self.shared.current.lock().clone()
    }

    async fn command(&self, cmd: &Cmd) -> RedisResult<Value> {
        let (mut conn, generation) = self.current();
        let r = conn.send_packed_command(cmd).await;
        match &r {
            Err(e) if primary_gone(e) && self.resolve(generation).await => {
                self.current().0.send_packed_command(cmd).await
            }
            _ => r,
        }
    }

    async fn commands(&self, pipeline: &Pipeline, offset: usize, count: usize) -> RedisResult<Vec<Value>> {
        let (mut conn, generation) = self.current();
        let r = conn.send_packed_commands(pipeline, offset, count).await;
        match &r {
            Err(e) if primary_gone(e) && self.resolve(generation).await => {
                self.current().0.send_packed_commands(pipeline, offset, count).await
            }
            _ => r,
        }
    }

    /// Asks the sentinels for the primary after a command on generation `seen` failed, and
    /// switches to it if it moved; true when the current primary is no longer the one `seen`
    /// named. Failures are only logged: the command's own error is what the caller sees, and
    /// its next failure asks again.
    async fn resolve(&self, seen: u64) -> bool {
        let mut sentinel = self.shared.sentinel.lock().await;
        if self.current().1 != seen {
            return true; // another command already switched
        }
        let timeout = self.shared.timeout;
        let client = match within(timeout, sentinel.async_get_client()).await {
            Ok(c) => c,
            Err(e) => {
                tracing::debug!(error = %e, "redis sentinel: no primary yet");
                return false;
            }
        };
        let info = client.get_connection_info().clone();
        if info.addr() == self.shared.primary.borrow().addr() {
            return false; // still the same primary: the connection manager reconnects to it
        }
        match within(timeout, client.get_connection_manager_with_config(self.shared.cfg.clone())).await {
            Ok(manager) => {
                tracing::info!(primary = %info.addr(), "redis sentinel: following the new primary");
                *self.shared.current.lock() = (manager, seen + 1);
                self.shared.primary.send_replace(info);
                true
            }
            Err(e) => {
                tracing::debug!(error = %e, "redis sentinel: new primary unreachable");
                false
            }
        }
    }
}

/// Errors after which the primary may have changed.
fn primary_gone(e: &RedisError) -> bool {
    e.is_io_error()
        || e.is_timeout()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || matches!(e.kind(), ErrorKind::Server(redis::ServerErrorKind::ReadOnly | redis::ServerErrorKind::MasterDown))
        // A script that wrote on a demoted primary reports READONLY inside its own error.
        || e.to_string().contains("READONLY")
}

async fn within<T>(timeout: Duration, f: impl Future<Output = RedisResult<T>>) -> RedisResult<T> {
    match tokio::time::timeout(timeout, f).await {
        Ok(r) => r,
        Err(_) => Err(RedisError::from(std::io::Error::from(std::io::ErrorKind::TimedOut))),
    }
}
