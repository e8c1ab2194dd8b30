//! The conformance suite's factory: clients of one bucket, each with an operator aimed at it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use lock_core::backend::Mutex;
use lock_nats::NatsLock;
use lock_nats::async_nats::jetstream::kv::Operation;
use lock_testkit::proxy::Proxy;
use lock_testkit::{Client, ClientFaults, Factory, FaultResult, Unsupported};
use tokio::sync::OnceCell;

use crate::server::{ENV_URL, shared};

/// Clients of the NATS backend on one bucket, each a connection of its own, directly or
/// through a proxy of its own (to cut its connection).
#[derive(Debug)]
pub struct NatsFactory {
    endpoint: String,
    bucket: String,
    ttl: Duration,
    /// `Some`: every client connects through a proxy of its own, kept here.
    proxies: Option<Mutex<Vec<Arc<Proxy>>>>,
    /// The operator's own client, made on first use.
    admin: Arc<OnceCell<NatsLock>>,
}

/// The conformance suite's TTL: short, so the cases that wait a lease out are short, but a
/// second, as etcd's: a hold asking a longer lease is kept by rewrites every third of it, and
/// 500 ms let a client starved by a loaded 2-core machine lose holds (a semaphore case saw
/// two holders of a slot after its keeper gave a hold up).
pub const TTL: Duration = Duration::from_secs(1);

impl NatsFactory {
    /// Clients of `bucket` (created with `ttl` if absent) on the server at `endpoint`
    /// (`host:port`), connecting directly.
    pub fn new(endpoint: impl Into<String>, bucket: impl Into<String>, ttl: Duration) -> Self {
        let (endpoint, bucket) = (endpoint.into(), bucket.into());
        NatsFactory { endpoint, bucket, ttl, proxies: None, admin: Arc::default() }
    }

    /// Clients of the bucket `conformance` with a 1 s TTL, on `LOCK_TEST_NATS_URL`'s server
    /// or the shared one; `None` (a skip) as [`shared`] says.
    pub fn on_shared() -> Option<Self> {
        let endpoint = match std::env::var(ENV_URL).ok().filter(|v| !v.trim().is_empty()) {
            Some(url) => url.trim().trim_start_matches("nats://").trim_end_matches('/').to_owned(),
            None => shared()?.endpoint(),
        };
        Some(NatsFactory::new(endpoint, "conformance", TTL))
    }

    /// The same clients, each through a proxy of its own (its `cut_connection` hook closes
    /// the client's connection, which it survives by reconnecting).
    pub fn proxied(mut self) -> Self {
        self.proxies = Some(Mutex::default());
        self
    }

    /// The server's `host:port`.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// A client of the bucket at `endpoint`.
    ///
    /// # Panics
    /// When it cannot connect (a test's fixture is broken).
    pub async fn connect(&self, endpoint: &str) -> NatsLock {
        NatsLock::builder()
            .servers([endpoint])
            .bucket(&self.bucket)
            .lease_ttl(self.ttl)
            .request_timeout(Duration::from_secs(2))
            .build()
            .await
            .unwrap_or_else(|e| panic!("connect to nats at {endpoint}: {e}"))
    }
}

#[lock_core::async_trait]
impl Factory for NatsFactory {
    fn label(&self) -> String {
        let proxied = if self.proxies.is_some() { "+proxied" } else { "" };
        format!("nats{proxied}")
    }

    async fn client(&self) -> Client {
        let proxy = match &self.proxies {
            Some(all) => {
                let target: SocketAddr = self.endpoint.parse().expect("one host:port");
                let proxy = Arc::new(Proxy::start(target).await.expect("proxy"));
                all.lock().push(proxy.clone());
                Some(proxy)
            }
            None => None,
        };
        let endpoint = proxy.as_ref().map_or_else(|| self.endpoint.clone(), |p| p.addr().to_string());
        let lock = Arc::new(self.connect(&endpoint).await);
        let operator = Operator {
            admin: self.admin.clone(),
            endpoint: self.endpoint.clone(),
            bucket: self.bucket.clone(),
            ttl: self.ttl,
            proxy,
        };
        Client::with_faults(lock, operator)
    }

    fn lease(&self) -> Duration {
        self.ttl
    }
}

/// An operator with a client of its own (never the holder's: a crashed holder is a dropped
/// client), aimed at one client.
struct Operator {
    admin: Arc<OnceCell<NatsLock>>,
    endpoint: String,
    bucket: String,
    ttl: Duration,
    proxy: Option<Arc<Proxy>>,
}

#[lock_core::async_trait]
impl ClientFaults for Operator {
    /// Delete the lock's key behind its holder's back, as `nats kv del` would: the holder's
    /// next renewal is refused.
    async fn sever(&self, key: &str) -> FaultResult {
        let admin = self
            .admin
            .get_or_init(|| async {
                NatsFactory::new(self.endpoint.clone(), self.bucket.clone(), self.ttl)
                    .connect(&self.endpoint)
                    .await
            })
            .await;
        let (kv, name) = (admin.bucket_store(), admin.bucket_key(key));
        let entry = kv.entry(name.as_str()).await.expect("read the lock's key");
        assert!(entry.is_some_and(|e| e.operation == Operation::Put), "sever: no lock held under {name}");
        kv.delete(name.as_str()).await.expect("delete the holder's key");
        Ok(())
    }

    async fn cut_connection(&self, _key: &str) -> FaultResult {
        let Some(proxy) = &self.proxy else {
            return Err(Unsupported::new("cut_connection", "clients connect directly (no proxy to cut)"));
        };
        proxy.cut();
        Ok(())
    }
}
