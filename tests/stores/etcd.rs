//! The conformance suite on the etcd backend, against the shared single-node etcd of this test
//! binary (or `LOCK_TEST_ETCD_URL`): once with clients connected directly, once with the
//! holder's lease revoked instead of its key deleted, and once with the holder's connection cut
//! first (each client behind its own proxy).
use std::sync::{Arc, Weak};
use std::time::Duration;

use lock_etcd::EtcdLock;
use lock_etcd::etcd_client::{self as etcd, GetOptions, SortOrder, SortTarget};
use lock_testkit::proxy::Proxy;
use lock_testkit::{Client, ClientFaults, Factory, FaultResult};

use crate::support;

use support::proxied::{Proxies, cut};

/// Lease TTL of every test client: etcd's floor with the test kit's Raft timings.
const TTL: Duration = Duration::from_secs(1);

/// Clients of the etcd backend, each with its own lease.
#[derive(Debug)]
pub struct EtcdFactory {
    endpoints: Vec<String>,
    /// Used by the clients' `cut_connection` hooks.
    proxies: Proxies,
}

/// A factory on the shared server.
pub async fn factory() -> EtcdFactory {
    let endpoints =
        lock_etcd_testing::external_url().unwrap_or_else(|| lock_etcd_testing::shared_etcd().endpoint());
    EtcdFactory { endpoints: endpoints.split(',').map(str::to_owned).collect(), proxies: Proxies::direct() }
}

/// A factory whose clients connect through proxies of their own, on the shared server.
pub async fn proxied() -> EtcdFactory {
    EtcdFactory { proxies: Proxies::each(), ..factory().await }
}

#[lock_core::async_trait]
impl Factory for EtcdFactory {
    fn label(&self) -> String {
        let proxied = if self.proxies.are_used() { "+proxied" } else { "" };
        format!("etcd{proxied}")
    }

    async fn client(&self) -> Client {
        let proxy = self.proxies.start(&self.endpoints[0]).await;
        let endpoints = match &proxy {
            Some(p) => vec![p.addr().to_string()],
            None => self.endpoints.clone(),
        };
        let lock = EtcdLock::builder()
            .endpoints(endpoints)
            .prefix("/conformance")
            .lease_ttl(TTL)
            .request_timeout(Duration::from_secs(2))
            .build()
            .await
            .expect("connect to etcd");
        let lock = Arc::new(lock);
        // Weak: a dropped client must revoke its lease (the crash cases need it).
        let faults = Operator { endpoints: self.endpoints.clone(), holder: Arc::downgrade(&lock), proxy };
        Client::with_faults(lock, faults)
    }

    fn lease(&self) -> Duration {
        TTL
    }
}

/// An operator, with a client of its own, aimed at one client.
struct Operator {
    /// The server itself, not the client's proxy.
    endpoints: Vec<String>,
    holder: Weak<EtcdLock>,
    proxy: Option<Arc<Proxy>>,
}

impl Operator {
    async fn admin(&self) -> etcd::Client {
        etcd::Client::connect(&self.endpoints, None).await.expect("admin connects")
    }

    fn holder(&self) -> Arc<EtcdLock> {
        self.holder.upgrade().expect("the holder is still alive")
    }
}

#[lock_core::async_trait]
impl ClientFaults for Operator {
    /// Delete the key at the head of the lock's queue (the holder's), as `etcdctl del` would.
    async fn sever(&self, key: &str) -> FaultResult {
        let prefix = self.holder().lock_prefix(key);
        let mut admin = self.admin().await;
        let first =
            GetOptions::new().with_prefix().with_sort(SortTarget::Create, SortOrder::Ascend).with_limit(1);
        let resp = admin.get(prefix.as_str(), Some(first)).await.expect("read the lock's queue");
        let head = resp.kvs().first().unwrap_or_else(|| panic!("sever: no lock key under {prefix}"));
        admin.delete(head.key(), None).await.expect("delete the holder's key");
        Ok(())
    }

    /// Close the client's connection; the client reconnects and its lease, kept alive within
    /// its TTL, keeps its locks.
    async fn cut_connection(&self, _key: &str) -> FaultResult {
        cut(self.proxy.as_deref())
    }

    /// Revoke the client's lease from another client: every key under it goes.
    async fn expire_session(&self) -> FaultResult {
        let lease = self.holder().lease_id();
        self.admin().await.lease_revoke(lease).await.expect("revoke the holder's lease");
        Ok(())
    }
}

mod plain {
    lock_testkit::conformance_tests!(crate::etcd::factory().await);
    lock_testkit::primitive_tests!(crate::etcd::factory().await);
}

/// The cases that lose a hold, with the holder's lease revoked instead of its key deleted.
mod lease_revoked {
    use lock_testkit::{LoseBy, Loss};
    lock_testkit::conformance_tests!(@cases LoseBy::new(crate::etcd::factory().await, Loss::ExpireSession);
        lost_signal_fires, lost_reaches_nested_guards, late_cleanup_spares_later_grant);
}

/// The cases that sever a hold, with the holder's connection closed first (it reconnects, then
/// finds its key gone).
mod killed {
    use lock_testkit::{LoseBy, Loss};
    lock_testkit::conformance_tests!(@cases LoseBy::new(crate::etcd::proxied().await, Loss::CutThenSever);
        renew_extends_lease, lost_signal_fires);
}

/// A latch whose store stops answering (its client's connections blackholed) answers by its
/// deadlines, not by the store's timeouts (`lock_testkit::stall`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latch_on_an_unreachable_store_answers_by_its_deadline() {
    let s = lock_etcd_testing::shared_etcd();
    let connect = |url: String| async move { dlock::from_url(&url).await.expect("backend") };
    lock_testkit::stall::unreachable_latch_answers_in_time(&s.url("latch"), s.port(), connect).await;
}
