//! `build()`: the settings checked, then the connection to one server, a cluster or the
//! primary the sentinels name, with no password in any error.

use lock_core::backend::redact::{redact_url, scrub, url_password};
use lock_core::{LockError, Result};
use redis::sentinel::{SentinelClient, SentinelNodeConnectionInfo, SentinelServerType};
use redis::{Client, ConnectionInfo, IntoConnectionInfo, RedisError};

use super::{MIN_FAIR_WAITER_TIMEOUT, MIN_INTEROP_POLL, RedisLockBuilder, Source};
use crate::backend::{RedisLock, manager_config};
use crate::conn::{Kind, RedisConnection, SentinelConn};
use crate::error::{NAME, classify, is_temporary};
use crate::keys::{DEFAULT_KEY_PREFIX, KeyLayout};
use crate::target::{ClusterSpec, Target};
use crate::topology::{self, Topology};

impl RedisLockBuilder {
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
                        lock_core::backend::ensure_tls_provider();
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
        lock_core::backend::ensure_tls_provider();
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
        lock_core::backend::ensure_tls_provider();
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
