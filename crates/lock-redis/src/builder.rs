//! Configuration: `RedisLock::builder().url(..).mode(..).key_prefix(..).build().await`, or
//! `RedisLock::from_url(..)`.

use std::fmt;
use std::time::Duration;

use lock_core::backend::redact::{redact_url, scrub, url_password};
use lock_core::{LockError, Result};
use redis::aio::ConnectionManager;
use redis::cluster_async::ClusterConnection;
use redis::sentinel::{SentinelClient, SentinelNodeConnectionInfo, SentinelServerType};
use redis::{Client, ConnectionInfo, IntoConnectionInfo, RedisError};

use crate::backend::{RedisLock, manager_config};
use crate::conn::{Kind, RedisConnection, SentinelConn};
use crate::error::{NAME, classify, is_temporary};
use crate::keys::{DEFAULT_KEY_PREFIX, KeyLayout};
use crate::options::{self, Mode};
use crate::replica::{DEFAULT_REPLICA_ACK_TIMEOUT, ReplicaAck};
use crate::target::{ClusterSpec, Target};
use crate::topology::{self, Topology};

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

    /// Connect and build.
    ///
    /// # Errors
    /// [`LockError::InvalidConfig`] for a bad URL, prefix or timeout (password redacted),
    /// [`LockError::FeatureNotEnabled`] for `rediss://` without the `tls` feature, and backend
    /// errors when the first connection fails (authentication failures are permanent).
    pub async fn build(mut self) -> Result<RedisLock> {
        let interop = self.mode.is_interop();
        let key_prefix = self
            .key_prefix
            .clone()
            .unwrap_or_else(|| if interop { String::new() } else { DEFAULT_KEY_PREFIX.to_owned() });
        // The native modes wrap the key in a hash tag, which braces in the prefix would move.
        if !interop && key_prefix.contains(['{', '}']) {
            return Err(invalid("key prefix must not contain '{' or '}'".to_owned()));
        }
        if self.interop_poll < MIN_INTEROP_POLL {
            return Err(invalid(format!("interop poll interval must be at least {MIN_INTEROP_POLL:?}")));
        }
        if self.fair_waiter_timeout < MIN_FAIR_WAITER_TIMEOUT {
            return Err(invalid(format!("fair waiter timeout must be at least {MIN_FAIR_WAITER_TIMEOUT:?}")));
        }
        let topology = match &self.source {
            Source::Url(url) => topology::parse(url)?,
            _ => None,
        };
        let on_cluster = self.cluster.is_some() || matches!(topology, Some(Topology::Cluster { .. }));
        if let Some(ack) = self.replica_ack {
            if ack.replicas == 0 || ack.timeout.is_zero() {
                return Err(invalid("replica_ack needs at least one replica and a timeout".to_owned()));
            }
            // The reply must come before the connection gives up on it.
            if ack.timeout >= self.response_timeout {
                return Err(invalid(format!(
                    "replica ack timeout {:?} must be shorter than the response timeout {:?}",
                    ack.timeout, self.response_timeout
                )));
            }
        }
        if interop && on_cluster {
            // The other library's key has no hash tag: our fence counter next to it (and
            // python-redis-lock's signal list) would be in another slot.
            return Err(invalid(
                "the interop modes (redis-py, python-redis-lock) cannot run on a cluster".to_owned(),
            ));
        }
        let layout = KeyLayout::for_mode(key_prefix, self.mode);
        if let Some(topology) = topology {
            let Source::Url(url) = &self.source else { unreachable!("a topology comes from a url") };
            let (conn, target) = match topology {
                Topology::Cluster { nodes } => self.connect_cluster(url, &nodes).await?,
                Topology::Sentinel { sentinels, master, node } => {
                    self.connect_sentinel(url, &sentinels, master, &node).await?
                }
            };
            return Ok(self.finish(conn, target, layout));
        }
        if let Some(c) = self.cluster.clone() {
            return Ok(self.finish(RedisConnection::new(Kind::Cluster(c)), Target::Unknown, layout));
        }
        let password = self.credentials.as_ref().map(|(_, p)| p.clone());
        let source = std::mem::replace(&mut self.source, Source::None);
        let client = match source {
            Source::None => None,
            Source::Client(c) => Some(*c),
            Source::Url(url) => {
                let scheme = url.split_once("://").map_or("", |(s, _)| s).to_ascii_lowercase();
                if !cfg!(feature = "tls") && (scheme == "rediss" || scheme == "valkeys") {
                    return Err(LockError::FeatureNotEnabled { scheme, feature: "tls" });
                }
                let info = url.as_str().into_connection_info().map_err(|e| {
                    let secrets: Vec<&str> = url_password(&url).into_iter().collect();
                    invalid(scrub(&format!("{}: {e}", redact_url(&url)), &secrets))
                })?;
                // redis-rs leaves Nagle on; a lock's small request/reply traffic wants it off.
                let tcp = info.tcp_settings().clone().set_nodelay(true);
                let info = info.set_tcp_settings(tcp);
                let secrets: Vec<&str> = url_password(&url).into_iter().collect();
                let bad =
                    |e: redis::RedisError| invalid(scrub(&format!("{}: {e}", redact_url(&url)), &secrets));
                #[cfg(feature = "tls")]
                let client = match self.tls_root_cert.clone() {
                    Some(pem) => {
                        // redis' rustls has no crypto provider of its own; use ring unless one is set.
                        let _ = rustls::crypto::ring::default_provider().install_default();
                        let certs = redis::TlsCertificates { client_tls: None, root_cert: Some(pem) };
                        Client::build_with_tls(info, certs).map_err(bad)?
                    }
                    None => Client::open(info).map_err(bad)?,
                };
                #[cfg(not(feature = "tls"))]
                let client = Client::open(info).map_err(bad)?;
                Some(client)
            }
        };
        let client = match (client, &self.credentials) {
            (Some(c), Some((user, pw))) => {
                let info = c.get_connection_info().clone();
                let mut settings = info.redis_settings().clone().set_password(pw);
                if let Some(u) = user {
                    settings = settings.set_username(u);
                }
                Some(Client::open(info.set_redis_settings(settings)).map_err(classify)?)
            }
            (c, _) => c,
        };
        #[cfg(feature = "tls")]
        {
            // redis' rustls has no crypto provider of its own; use ring unless one is set.
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        let conn = match (self.manager.clone(), &client) {
            (Some(m), _) => m,
            (None, Some(c)) => {
                // One plain attempt first: it fails at once with the real cause (refused, bad
                // password, TLS), where the manager would retry for seconds and then report
                // only its last attempt.
                let probe = redis::AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(self.connection_timeout))
                    .set_response_timeout(Some(self.response_timeout));
                let first = c.get_multiplexed_async_connection_with_config(&probe).await.map(drop);
                let cfg = manager_config(self.connection_timeout, self.response_timeout);
                let managed = match first {
                    Ok(()) => c.get_connection_manager_with_config(cfg).await,
                    Err(e) => Err(e),
                };
                managed.map_err(|e| {
                    let pw = password
                        .clone()
                        .or_else(|| c.get_connection_info().redis_settings().password().map(str::to_owned));
                    match pw {
                        // Keep the typed source unless it would leak the password.
                        Some(pw) if !pw.is_empty() && e.to_string().contains(&pw) => {
                            let temporary = is_temporary(&e);
                            let msg = scrub(&e.to_string(), &[&pw]);
                            if temporary {
                                LockError::temporary(NAME, msg)
                            } else {
                                LockError::permanent(NAME, msg)
                            }
                        }
                        _ => classify(e),
                    }
                })?
            }
            (None, None) => return Err(invalid("give a url, a client or a connection manager".to_owned())),
        };
        let target =
            client.as_ref().map_or(Target::Unknown, |c| Target::Single(c.get_connection_info().clone()));
        Ok(self.finish(RedisConnection::new(Kind::Single(conn)), target, layout))
    }

    fn finish(&self, conn: RedisConnection, target: Target, layout: KeyLayout) -> RedisLock {
        RedisLock::new(
            conn,
            target,
            self.notifications,
            self.mode,
            layout,
            self.fair_waiter_timeout,
            self.connection_timeout,
            self.interop_poll,
            self.replica_ack,
        )
    }

    /// `url`'s node URLs as connection infos (TCP without Nagle, the builder's credentials).
    fn node_infos(&self, url: &str, nodes: &[String]) -> Result<Vec<ConnectionInfo>> {
        nodes
            .iter()
            .map(|n| {
                let info = n.as_str().into_connection_info().map_err(|e| self.bad_url(url, e))?;
                let tcp = info.tcp_settings().clone().set_nodelay(true);
                Ok(self.with_credentials(info.set_tcp_settings(tcp)))
            })
            .collect()
    }

    /// `info` with the credentials of [`credentials`](Self::credentials), if set.
    fn with_credentials(&self, info: ConnectionInfo) -> ConnectionInfo {
        let Some((user, pw)) = &self.credentials else { return info };
        let mut settings = info.redis_settings().clone().set_password(pw);
        if let Some(u) = user {
            settings = settings.set_username(u);
        }
        info.set_redis_settings(settings)
    }

    /// A configuration error about `url`, without its password.
    fn bad_url(&self, url: &str, e: RedisError) -> LockError {
        let secrets: Vec<&str> = url_password(url).into_iter().collect();
        invalid(scrub(&format!("{}: {e}", redact_url(url)), &secrets))
    }

    /// A connection error, without any password the URL or the builder holds.
    fn failed(&self, url: &str, e: RedisError) -> LockError {
        let mut secrets: Vec<&str> = url_password(url).into_iter().collect();
        if let Some((_, pw)) = &self.credentials {
            secrets.push(pw);
        }
        let msg = e.to_string();
        if secrets.iter().any(|s| !s.is_empty() && msg.contains(s)) {
            let msg = scrub(&msg, &secrets);
            return if is_temporary(&e) {
                LockError::temporary(NAME, msg)
            } else {
                LockError::permanent(NAME, msg)
            };
        }
        classify(e)
    }

    /// Commands through a cluster connection (the user's, or one opened on the seed nodes);
    /// notifications through a second one on the same nodes.
    async fn connect_cluster(&self, url: &str, nodes: &[String]) -> Result<(RedisConnection, Target)> {
        let spec = ClusterSpec {
            nodes: self.node_infos(url, nodes)?,
            connection_timeout: self.connection_timeout,
            response_timeout: self.response_timeout,
            tls_root_cert: self.tls_root_cert.clone(),
        };
        #[cfg(feature = "tls")]
        {
            // redis' rustls has no crypto provider of its own; use ring unless one is set.
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        let conn = match self.cluster.clone() {
            Some(c) => c,
            None => {
                let client = spec.builder().build().map_err(|e| self.bad_url(url, e))?;
                // The first connection fetches the slot map from the seed nodes.
                let first =
                    tokio::time::timeout(2 * self.connection_timeout, client.get_async_connection()).await;
                match first {
                    Ok(r) => r.map_err(|e| self.failed(url, e))?,
                    Err(_) => {
                        return Err(LockError::temporary(
                            NAME,
                            format!("no cluster node of {} answered in time", redact_url(url)),
                        ));
                    }
                }
            }
        };
        Ok((RedisConnection::new(Kind::Cluster(conn)), Target::Cluster(spec)))
    }

    /// Commands to the primary the sentinels name, followed across a failover.
    async fn connect_sentinel(
        &self,
        url: &str,
        sentinels: &[String],
        master: String,
        node: &str,
    ) -> Result<(RedisConnection, Target)> {
        let node = self.with_credentials(node.into_connection_info().map_err(|e| self.bad_url(url, e))?);
        let db = node.redis_settings().db();
        let tcp = node.tcp_settings().clone().set_nodelay(true);
        let node_info = SentinelNodeConnectionInfo::default()
            .set_redis_connection_info(node.redis_settings().clone())
            .set_tcp_settings(tcp);
        let addrs: Vec<String> =
            sentinels.iter().map(|s| s.trim_start_matches("redis://").to_owned()).collect();
        let client = SentinelClient::build(
            sentinels.to_vec(),
            master.clone(),
            Some(node_info),
            SentinelServerType::Master,
        )
        .map_err(|e| self.bad_url(url, e))?;
        let cfg = manager_config(self.connection_timeout, self.response_timeout);
        let (conn, _) = SentinelConn::connect(client, cfg, self.connection_timeout)
            .await
            .map_err(|e| self.failed(url, e))?;
        let primary = conn.primary();
        let target = Target::Sentinel { sentinels: addrs, master, db, primary };
        Ok((RedisConnection::new(Kind::Sentinel(conn)), target))
    }
}

fn invalid(reason: String) -> LockError {
    LockError::InvalidConfig { reason }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn public_types_are_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<RedisLock>();
        check::<RedisLockBuilder>();
    }

    #[test]
    fn debug_never_shows_the_password() {
        let b = RedisLock::builder().url("redis://app:hunter2@127.0.0.1:1/").credentials(Some("u"), "s3cr3t");
        let s = format!("{b:?}");
        assert!(!s.contains("hunter2") && !s.contains("s3cr3t"), "{s}");
    }

    #[tokio::test]
    async fn bad_configs_are_refused_without_secrets() {
        let e = RedisLock::builder()
            .url("redis://127.0.0.1:1/")
            .key_prefix("a{b")
            .build()
            .await
            .expect_err("refused");
        assert!(matches!(e, LockError::InvalidConfig { .. }));
        let e = RedisLock::builder()
            .url("redis://127.0.0.1:1/")
            .mode(Mode::RedisPy)
            .interop_poll(Duration::from_millis(1))
            .build()
            .await
            .expect_err("refused");
        assert!(matches!(e, LockError::InvalidConfig { .. }), "{e:?}");
        // An interop prefix is part of the other library's name: braces pass the check (and
        // the build then fails only on the closed port).
        let e = RedisLock::builder()
            .url("redis://127.0.0.1:1/")
            .mode(Mode::RedisPy)
            .key_prefix("a{b}:")
            .connection_timeout(Duration::from_millis(200))
            .build()
            .await
            .expect_err("nothing listens");
        assert!(!matches!(e, LockError::InvalidConfig { .. }), "{e:?}");
        let e = RedisLock::builder().url("http://u:hunter2@h/").build().await.expect_err("refused");
        assert!(matches!(e, LockError::InvalidConfig { .. }), "{e:?}");
        assert!(!format!("{e} {e:?}").contains("hunter2"));
        if !cfg!(feature = "tls") {
            let e = RedisLock::builder().url("rediss://h:1/").build().await.expect_err("refused");
            assert!(matches!(e, LockError::FeatureNotEnabled { feature: "tls", .. }));
        }
    }
}
