//! Configuration: `RedisLock::builder().url(..).mode(..).key_prefix(..).build().await`, or
//! `RedisLock::from_url(..)`.

use std::fmt;
use std::time::Duration;

#[cfg(doc)]
use lock_core::LockError;
use lock_core::Result;
use lock_core::backend::redact::redact_url;
use redis::Client;
use redis::aio::ConnectionManager;
use redis::cluster_async::ClusterConnection;

use crate::backend::RedisLock;
use crate::options::{self, Mode};
use crate::replica::{DEFAULT_REPLICA_ACK_TIMEOUT, ReplicaAck};

mod connect;
#[cfg(test)]
mod tests;

/// Default time allowed to open a connection.
pub const DEFAULT_CONNECTION_TIMEOUT: Duration = Duration::from_secs(2);
/// Default time allowed for one command's reply. A reply that does not come in time is a
/// temporary error; the watchdog also stops waiting at the lease deadline on its own.
pub const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);
/// Default time a waiter (every mode) stays in the queue without a sign of life before others
/// may pass it (a live waiter renews its place every third of it, and a lock handed over to a
/// waiter waits that third for its claim).
pub const DEFAULT_FAIR_WAITER_TIMEOUT: Duration = Duration::from_secs(5);
/// Shortest fair waiter timeout: a waiter refreshes its place every third of it, which must
/// stay well above a round trip and the 1 ms resolution of timers.
const MIN_FAIR_WAITER_TIMEOUT: Duration = Duration::from_millis(30);
/// Default longest sleep of a waiter between attempts in the interop modes
/// ([`Mode::RedisPy`], [`Mode::PythonRedisLock`]): the other library's releases are not
/// published, so a waiter looks again at least this often (jittered in `[poll/2, poll]`).
pub const DEFAULT_INTEROP_POLL: Duration = Duration::from_millis(50);
/// Shortest interop poll interval: below it waiters would mostly load the server.
const MIN_INTEROP_POLL: Duration = Duration::from_millis(2);

impl RedisLock {
    /// Start configuring a backend.
    pub fn builder() -> RedisLockBuilder {
        RedisLockBuilder::default()
    }

    /// A backend on `url` with every other setting at its default. Two query options of this
    /// crate are read and removed before the URL reaches the driver:
    /// `mode=simple|reentrant|fair|redis-py|python-redis-lock` (default simple) and
    /// `key_prefix=...` (default `dlock:`, none in the interop modes; percent-decoded),
    /// `replica_ack=N` with `replica_ack_timeout=` (default 500ms; see
    /// [`RedisLockBuilder::replica_ack`]). The driver's
    /// own (`protocol=`; `db=`, `user=`, `pass=` for `redis+unix://`) stay; any other option is
    /// refused, so a typo is not silently ignored.
    ///
    /// # Errors
    /// As [`RedisLockBuilder::build`]; an unknown `mode`, an unknown option or an option given
    /// twice is [`LockError::InvalidConfig`].
    pub async fn from_url(url: &str) -> Result<Self> {
        let o = options::parse(url)?;
        let mut builder = Self::builder().url(o.url);
        if let Some(mode) = o.mode {
            builder = builder.mode(mode);
        }
        if let Some(prefix) = o.key_prefix {
            builder = builder.key_prefix(prefix);
        }
        if let Some(replicas) = o.replica_ack {
            builder =
                builder.replica_ack(replicas, o.replica_ack_timeout.unwrap_or(DEFAULT_REPLICA_ACK_TIMEOUT));
        }
        builder.build().await
    }
}

enum Source {
    None,
    Url(String),
    Client(Box<Client>),
}

/// Builder of a [`RedisLock`]. Start with [`RedisLock::builder`].
pub struct RedisLockBuilder {
    source: Source,
    manager: Option<ConnectionManager>,
    cluster: Option<ClusterConnection>,
    mode: Mode,
    /// `None`: the mode's default (`dlock:`, or none in the interop modes).
    key_prefix: Option<String>,
    credentials: Option<(Option<String>, String)>,
    connection_timeout: Duration,
    response_timeout: Duration,
    fair_waiter_timeout: Duration,
    interop_poll: Duration,
    notifications: bool,
    /// Replicas that must acknowledge each grant, and for how long to wait (`WAIT`).
    replica_ack: Option<ReplicaAck>,
    /// PEM CA certificate(s) that `rediss://` servers must chain to, instead of the system store.
    tls_root_cert: Option<Vec<u8>>,
}

impl fmt::Debug for RedisLockBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let source = match &self.source {
            Source::None => "none".to_owned(),
            Source::Url(u) => redact_url(u),
            Source::Client(_) => "client".to_owned(),
        };
        f.debug_struct("RedisLockBuilder")
            .field("source", &source)
            .field("connection_manager", &self.manager.is_some())
            .field("cluster_connection", &self.cluster.is_some())
            .field("mode", &self.mode)
            .field("key_prefix", &self.key_prefix)
            .field("username", &self.credentials.as_ref().map(|(u, _)| u))
            .field("password", &self.credentials.as_ref().map(|_| "***"))
            .field("connection_timeout", &self.connection_timeout)
            .field("response_timeout", &self.response_timeout)
            .field("fair_waiter_timeout", &self.fair_waiter_timeout)
            .field("interop_poll", &self.interop_poll)
            .field("notifications", &self.notifications)
            .field("replica_ack", &self.replica_ack)
            .field("tls_root_cert", &self.tls_root_cert.as_ref().map(|c| c.len()))
            .finish()
    }
}

impl Default for RedisLockBuilder {
    fn default() -> Self {
        RedisLockBuilder {
            source: Source::None,
            manager: None,
            cluster: None,
            mode: Mode::default(),
            key_prefix: None,
            credentials: None,
            connection_timeout: DEFAULT_CONNECTION_TIMEOUT,
            response_timeout: DEFAULT_RESPONSE_TIMEOUT,
            fair_waiter_timeout: DEFAULT_FAIR_WAITER_TIMEOUT,
            interop_poll: DEFAULT_INTEROP_POLL,
            notifications: true,
            replica_ack: None,
            tls_root_cert: None,
        }
    }
}

impl RedisLockBuilder {
    /// Trust the CA certificate(s) in `pem` (PEM) for `rediss://` URLs, instead of the system
    /// store: a private CA. The server's certificate must name the host of the URL.
    #[cfg(feature = "tls")]
    pub fn tls_root_cert(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls_root_cert = Some(pem.into());
        self
    }

    /// Connect to `url`: `redis://[user[:password]@]host[:port][/db]`, `rediss://` (feature
    /// `tls`), `redis+unix:///path`; a Redis Cluster:
    /// `redis+cluster://[user[:password]@]host1:port1,host2:port2,...` (seed nodes, default port
    /// 6379; `rediss+cluster://` with the `tls` feature); the primary a set of Sentinels
    /// watches: `redis+sentinel://[user[:password]@]s1:port1,s2:port2/master-name[/db]`
    /// (default port 26379; the credentials are the primary's, the sentinels are asked without
    /// any). The password is never printed.
    pub fn url(mut self, url: impl Into<String>) -> Self {
        self.source = Source::Url(url.into());
        self
    }

    /// Use an existing client (its connection settings, TLS and credentials).
    pub fn client(mut self, client: Client) -> Self {
        self.source = Source::Client(Box::new(client));
        self
    }

    /// Send lock commands through an existing connection manager. Release notifications need a
    /// second connection, which needs [`url`](Self::url) or [`client`](Self::client) too;
    /// without either, waiters poll.
    pub fn connection_manager(mut self, manager: ConnectionManager) -> Self {
        self.manager = Some(manager);
        self
    }

    /// Send lock commands through an existing cluster connection (a
    /// [`redis::cluster::ClusterClient`]'s). Release notifications need a second connection,
    /// which needs a `redis+cluster://` [`url`](Self::url) too; without it, waiters poll.
    /// The interop modes cannot run on a cluster.
    pub fn cluster_connection(mut self, conn: ClusterConnection) -> Self {
        self.cluster = Some(conn);
        self
    }

    /// Storage mode (default [`Mode::Simple`]).
    pub fn mode(mut self, mode: Mode) -> Self {
        self.mode = mode;
        self
    }

    /// Namespace in front of every Redis key (default `dlock:`). Must not contain `{` or `}`.
    ///
    /// Interop modes: put in front of the user key to make the lock name the other library
    /// is given (redis-py: the key `<prefix><key>`; python-redis-lock: `lock:<prefix><key>`),
    /// taken as is (braces allowed, nothing escaped); no prefix unless set.
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.key_prefix = Some(prefix.into());
        self
    }

    /// ACL user (or `None` for the default user) and password, overriding the URL's.
    pub fn credentials(mut self, username: Option<&str>, password: &str) -> Self {
        self.credentials = Some((username.map(str::to_owned), password.to_owned()));
        self
    }

    /// Time allowed to open a connection (default [`DEFAULT_CONNECTION_TIMEOUT`]).
    pub fn connection_timeout(mut self, timeout: Duration) -> Self {
        self.connection_timeout = timeout;
        self
    }

    /// Time allowed for one reply (default [`DEFAULT_RESPONSE_TIMEOUT`]).
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// How long a silent waiter keeps its place in the queue, in every mode (default
    /// [`DEFAULT_FAIR_WAITER_TIMEOUT`]); a third of it is the heartbeat of waiters and the
    /// claim window of a lock handed over to one (how long it is held for a vanished waiter).
    pub fn fair_waiter_timeout(mut self, timeout: Duration) -> Self {
        self.fair_waiter_timeout = timeout;
        self
    }

    /// Interop modes: the longest a waiter sleeps between attempts (default
    /// [`DEFAULT_INTEROP_POLL`], at least 2 ms), since the other library's releases are not
    /// published; our own releases still wake our waiters at once. Ignored by the other modes.
    pub fn interop_poll(mut self, poll: Duration) -> Self {
        self.interop_poll = poll;
        self
    }

    /// Whether waiters listen for releases on pub/sub (default `true`); `false` makes them poll.
    pub fn notifications(mut self, on: bool) -> Self {
        self.notifications = on;
        self
    }

    /// After each grant, wait until `replicas` replicas of the primary acknowledged it
    /// (`WAIT replicas timeout`, sent after the acquire script on the same connection, so it
    /// covers the hold and the fence increment). Fewer within `timeout`: the grant is released
    /// and the acquisition fails with a temporary error whose source is
    /// [`ReplicasNotAcknowledged`](crate::ReplicasNotAcknowledged). A promoted replica that
    /// acknowledged then knows the grant and its fence: a failover neither repeats the token nor
    /// frees the key, unless every acknowledging replica is lost too. Costs a round trip per
    /// grant plus the replicas' delay. Off by default. On a cluster the `WAIT` goes to the master
    /// of the lock's slot and counts its replicas. URL: `replica_ack=N`,
    /// `replica_ack_timeout=500ms`.
    pub fn replica_ack(mut self, replicas: u32, timeout: Duration) -> Self {
        self.replica_ack = Some(ReplicaAck { replicas, timeout });
        self
    }
}
