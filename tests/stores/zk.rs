//! The conformance suite on the zk backend, against the shared standalone ZooKeeper of this test
//! binary (or `LOCK_TEST_ZK_URL`): once without auth, once with digest auth, ACLs and a chroot;
//! and the cases that lose a hold once more with the holder's session ended behind its back
//! (each client behind its own proxy, so that it cannot take its session back meanwhile).
use std::sync::{Arc, Weak};
use std::time::Duration;

use lock_testkit::proxy::Proxy;
use lock_testkit::{Client, ClientFaults, Factory, FaultResult, Unsupported, eventually, zk_queue};
use lock_zk::{ZkLock, zookeeper_client as zk};

use crate::support;

use support::proxied::{Proxies, cut};

/// Session timeout of every test client; the server (tickTime 50 ms) accepts it as is.
const SESSION: Duration = Duration::from_millis(1000);
const USER: &str = "dlock-test";
const PASSWORD: &str = "conformance-pw";

/// How the factory's clients connect.
#[derive(Clone, Copy, Debug)]
pub enum Mode {
    /// No auth, open ACLs, no chroot.
    Plain,
    /// Digest auth, creator-only ACLs, a chroot (created on first use).
    Secured,
}

/// Clients of the zk backend, each with its own session.
#[derive(Debug)]
pub struct ZkFactory {
    mode: Mode,
    connect: String,
    /// Used by the clients' `cut_connection` and `expire_session` hooks.
    proxies: Proxies,
}

/// A factory for `mode` on the shared server.
pub async fn factory(mode: Mode) -> ZkFactory {
    let hosts =
        lock_zk_testing::external_url().unwrap_or_else(|| lock_zk_testing::shared_zk().connect_string());
    let connect = match mode {
        Mode::Plain => hosts,
        Mode::Secured => format!("{hosts}/dlock-secured"),
    };
    ZkFactory { mode, connect, proxies: Proxies::direct() }
}

/// A plain factory whose clients connect through proxies of their own, on the shared server.
pub async fn proxied() -> ZkFactory {
    ZkFactory { proxies: Proxies::each(), ..factory(Mode::Plain).await }
}

#[lock_core::async_trait]
impl Factory for ZkFactory {
    fn label(&self) -> String {
        let proxied = if self.proxies.are_used() { "+proxied" } else { "" };
        format!("zk/{:?}{proxied}", self.mode).to_lowercase()
    }

    async fn client(&self) -> Client {
        let proxy = self.proxies.start(self.connect.split(',').next().unwrap_or_default()).await;
        let connect = match &proxy {
            Some(p) => p.addr().to_string(),
            None => self.connect.clone(),
        };
        // The secured factory's chroot is made by its first client.
        let mut b = ZkLock::builder()
            .connect_string(&connect)
            .create_chroot(true)
            .root("/conformance")
            .session_timeout(SESSION);
        if let Mode::Secured = self.mode {
            b = b.auth(USER, PASSWORD);
        }
        let lock = Arc::new(b.build().await.expect("connect to zookeeper"));
        // Weak: a dropped client must close its session (the crash cases need it).
        let faults =
            Operator { mode: self.mode, connect: self.connect.clone(), holder: Arc::downgrade(&lock), proxy };
        Client::with_faults(lock, faults)
    }

    fn lease(&self) -> Duration {
        SESSION
    }
}

/// An operator, with a session of its own, aimed at one client.
struct Operator {
    mode: Mode,
    /// The server itself, not the client's proxy.
    connect: String,
    holder: Weak<ZkLock>,
    proxy: Option<Arc<Proxy>>,
}

impl Operator {
    async fn admin(&self) -> zk::Client {
        self.connector().connect(&self.connect).await.expect("admin connects")
    }

    fn connector(&self) -> zk::Connector {
        let c = zk::Client::connector().with_session_timeout(SESSION);
        match self.mode {
            Mode::Secured => c.with_auth("digest", format!("{USER}:{PASSWORD}").as_bytes()),
            Mode::Plain => c,
        }
    }

    fn holder(&self) -> Arc<ZkLock> {
        self.holder.upgrade().expect("the holder is still alive")
    }
}

#[lock_core::async_trait]
impl ClientFaults for Operator {
    /// Delete the node at the head of the key's queue (the holder's), or a semaphore's oldest
    /// lease, from another session.
    async fn sever(&self, key: &str) -> FaultResult {
        let mut dir = self.holder().lock_dir(key);
        let admin = self.admin().await;
        let mut children = admin.list_children(&dir).await.expect("list the lock directory");
        if children.iter().any(|c| c == zk_queue::LEASES) {
            // A semaphore: the oldest permit's lease.
            dir = format!("{dir}/{}", zk_queue::LEASES);
            children = admin.list_children(&dir).await.expect("list the leases");
        }
        let head = zk_queue::head(&children).unwrap_or_else(|| panic!("sever: no lock node under {dir}"));
        admin.delete(&format!("{dir}/{head}"), None).await.expect("delete the holder's node");
        Ok(())
    }

    /// Close the client's connection; ZooKeeper keeps the session, so the client reconnects
    /// and its locks survive.
    async fn cut_connection(&self, _key: &str) -> FaultResult {
        cut(self.proxy.as_deref())
    }

    /// Take the client's session over from another connection and close it, while the client's
    /// own connection is held up (else it would take the session back first).
    async fn expire_session(&self) -> FaultResult {
        let Some(proxy) = &self.proxy else {
            return Err(Unsupported::new(
                "expire_session",
                "clients connect directly: the holder would take its session back",
            ));
        };
        let session = self.holder().client().session().clone();
        proxy.blackhole(true);
        let killer = self.connector().with_session(session).connect(&self.connect).await;
        let killer = killer.expect("take the session over");
        // An ephemeral node of the session shows when the server has closed it.
        let marker = format!("/dlock-expire-{}", lock_testkit::key("session"));
        let ephemeral = zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all());
        killer.create(&marker, b"", &ephemeral).await.expect("marker node");
        drop(killer);
        let admin = self.admin().await;
        eventually(Duration::from_secs(5), "session closed", || {
            let check = admin.check_stat(&marker);
            async move { matches!(check.await, Ok(None)) }
        })
        .await;
        proxy.blackhole(false);
        Ok(())
    }
}

mod plain {
    lock_testkit::conformance_tests!(crate::zk::factory(crate::zk::Mode::Plain).await);
    lock_testkit::primitive_tests!(crate::zk::factory(crate::zk::Mode::Plain).await);
}

mod secured {
    lock_testkit::conformance_tests!(crate::zk::factory(crate::zk::Mode::Secured).await);
}

/// The cases that lose a hold, with the holder's session ended instead of its node deleted.
mod session_expired {
    use lock_testkit::{LoseBy, Loss};
    lock_testkit::conformance_tests!(@cases LoseBy::new(crate::zk::proxied().await, Loss::ExpireSession);
        lost_signal_fires, lost_reaches_nested_guards, late_cleanup_spares_later_grant);
}

/// The cases that sever a hold, with the holder's connection closed first (it reconnects within
/// its session, then finds its node gone).
mod killed {
    use lock_testkit::{LoseBy, Loss};
    lock_testkit::conformance_tests!(@cases LoseBy::new(crate::zk::proxied().await, Loss::CutThenSever);
        renew_extends_lease, lost_signal_fires);
}

/// A latch whose store stops answering (its client's connections blackholed) answers by its
/// deadlines, not by the store's timeouts (`lock_testkit::stall`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latch_on_an_unreachable_store_answers_by_its_deadline() {
    let s = lock_zk_testing::shared_zk();
    let url = format!("zk://{}/", s.connect_string());
    let connect = |url: String| async move { dlock::from_url(&url).await.expect("backend") };
    lock_testkit::stall::unreachable_latch_answers_in_time(&url, s.port(), connect).await;
}
