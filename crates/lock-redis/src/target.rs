//! Where a backend's server is: what the subscriber connects to and what `identity` names.

use std::time::Duration;

use redis::ConnectionInfo;
use redis::cluster::ClusterClientBuilder;
use tokio::sync::watch;

use crate::notify::Source;

/// Where the backend's server is: what the subscriber connects to and what `identity` names.
pub(crate) enum Target {
    /// Built from a bare connection manager or cluster connection: the address is unknown
    /// (waiters poll).
    Unknown,
    /// One server.
    Single(ConnectionInfo),
    /// A cluster: its seed nodes.
    Cluster(ClusterSpec),
    /// The primary named by `master` on the sentinels; `primary` follows it.
    Sentinel { sentinels: Vec<String>, master: String, db: i64, primary: watch::Receiver<ConnectionInfo> },
}

/// How to open another connection to a cluster (the subscriber's).
pub(crate) struct ClusterSpec {
    pub(crate) nodes: Vec<ConnectionInfo>,
    pub(crate) connection_timeout: Duration,
    pub(crate) response_timeout: Duration,
    /// PEM CA certificate(s) for `rediss+cluster://`.
    #[cfg_attr(not(feature = "tls"), allow(dead_code))]
    pub(crate) tls_root_cert: Option<Vec<u8>>,
}

impl ClusterSpec {
    /// A client builder with the seed nodes (their credentials and TLS), the timeouts, and few
    /// retries: a request redirected (MOVED, ASK) or refused during a failover (CLUSTERDOWN,
    /// TRYAGAIN) is retried a few times, then the caller sees a temporary error.
    pub(crate) fn builder(&self) -> ClusterClientBuilder {
        let b = ClusterClientBuilder::new(self.nodes.clone())
            .connection_timeout(self.connection_timeout)
            .response_timeout(self.response_timeout)
            .retries(CLUSTER_RETRIES)
            .min_retry_wait(10)
            .max_retry_wait(200);
        #[cfg(feature = "tls")]
        let b = match &self.tls_root_cert {
            Some(pem) => b.certs(redis::TlsCertificates { client_tls: None, root_cert: Some(pem.clone()) }),
            None => b,
        };
        b
    }
}

/// Retries of one cluster request (redirections, a node reconnecting).
const CLUSTER_RETRIES: u32 = 3;

impl Target {
    /// The subscriber's connection.
    pub(crate) fn source(&self) -> Source {
        match self {
            Target::Unknown => unreachable!("no notifier without an address"),
            Target::Single(info) => Source::Single(info.clone()),
            Target::Cluster(spec) => Source::Cluster(Box::new(spec.builder())),
            Target::Sentinel { primary, .. } => Source::Sentinel(primary.clone()),
        }
    }

    /// The addresses, for `Debug` (no credentials).
    pub(crate) fn addresses(&self) -> Option<String> {
        match self {
            Target::Unknown => None,
            Target::Single(info) => Some(info.addr().to_string()),
            Target::Cluster(spec) => Some(join(spec.nodes.iter().map(|n| n.addr().to_string()))),
            Target::Sentinel { sentinels, master, .. } => Some(format!("{}/{master}", sentinels.join(","))),
        }
    }

    /// The lock space's name, without credentials (see [`LockBackend::identity`](lock_core::backend::LockBackend::identity)).
    pub(crate) fn identity(&self, space: &str) -> String {
        match self {
            Target::Single(i) => format!("redis://{}/{}?{space}", i.addr(), i.redis_settings().db()),
            Target::Cluster(spec) => {
                format!("redis+cluster://{}/?{space}", join(spec.nodes.iter().map(|n| n.addr().to_string())))
            }
            Target::Sentinel { sentinels, master, db, .. } => {
                format!("redis+sentinel://{}/{master}/{db}?{space}", sentinels.join(","))
            }
            // Built from a bare connection: the address is unknown here.
            Target::Unknown => format!("redis://?{space}"),
        }
    }
}

fn join(it: impl Iterator<Item = String>) -> String {
    it.collect::<Vec<_>>().join(",")
}
