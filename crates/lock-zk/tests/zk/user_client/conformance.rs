//! The conformance suite on locks built on user clients: each client is the user's own
//! `zookeeper_client::Client`, chrooted, connected through a proxy of its own (for the fault
//! hooks), and handed to `ZkLockBuilder::client`.

use std::sync::{Arc, Weak};
use std::time::Duration;

use lock_core::backend::Mutex;
use lock_testkit::proxy::Proxy;
use lock_testkit::{Client, ClientFaults, Factory, FaultResult, eventually, zk_queue};
use lock_zk::{ZkLock, zookeeper_client as zk};

const SESSION: Duration = Duration::from_millis(1000);
const CHROOT: &str = "/dlock-user-client";

#[derive(Debug)]
pub struct UserClients {
    /// The server itself (the operators' sessions go there directly).
    server: String,
    proxies: Mutex<Vec<Arc<Proxy>>>,
}

pub async fn factory() -> UserClients {
    let server = lock_zk_testing::shared_zk().connect_string();
    let admin = zk::Client::connect(&server).await.expect("admin");
    match admin.create(CHROOT, b"", &zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all())).await {
        Ok(_) | Err(zk::Error::NodeExists) => {}
        Err(e) => panic!("create the chroot: {e}"),
    }
    UserClients { server, proxies: Mutex::default() }
}

#[lock_core::async_trait]
impl Factory for UserClients {
    fn label(&self) -> String {
        "zk/user-client".to_owned()
    }

    async fn client(&self) -> Client {
        let proxy = Arc::new(Proxy::start(self.server.parse().expect("host:port")).await.expect("proxy"));
        self.proxies.lock().push(proxy.clone());
        let user = zk::Client::connector()
            .with_session_timeout(SESSION)
            .connect(&format!("{}{CHROOT}", proxy.addr()))
            .await
            .expect("user's client");
        // The lock keeps the only clone: a dropped client closes its session (crash cases).
        let lock = Arc::new(ZkLock::builder().client(user).root("/conformance").build().await.expect("lock"));
        let faults = Operator { server: self.server.clone(), holder: Arc::downgrade(&lock), proxy };
        Client::with_faults(lock, faults)
    }

    fn lease(&self) -> Duration {
        SESSION
    }
}

struct Operator {
    server: String,
    holder: Weak<ZkLock>,
    proxy: Arc<Proxy>,
}

impl Operator {
    async fn admin(&self) -> zk::Client {
        zk::Client::connect(&format!("{}{CHROOT}", self.server)).await.expect("admin connects")
    }

    fn holder(&self) -> Arc<ZkLock> {
        self.holder.upgrade().expect("the holder is still alive")
    }
}

#[lock_core::async_trait]
impl ClientFaults for Operator {
    /// Delete the node at the head of the key's queue (the holder's) from another session.
    async fn sever(&self, key: &str) -> FaultResult {
        let dir = self.holder().lock_dir(key);
        let admin = self.admin().await;
        let children = admin.list_children(&dir).await.expect("list the lock directory");
        let head = zk_queue::head(&children).unwrap_or_else(|| panic!("sever: no lock node under {dir}"));
        admin.delete(&format!("{dir}/{head}"), None).await.expect("delete the holder's node");
        Ok(())
    }

    async fn cut_connection(&self, _key: &str) -> FaultResult {
        self.proxy.cut();
        Ok(())
    }

    /// Take the user's session over from another connection and close it, while the
    /// client's own connection is held up (else it would take the session back first).
    async fn expire_session(&self) -> FaultResult {
        let session = self.holder().client().session().clone();
        self.proxy.blackhole(true);
        let killer = zk::Client::connector()
            .with_session(session)
            .with_session_timeout(SESSION)
            .connect(&self.server)
            .await
            .expect("take the session over");
        let marker = format!("/dlock-expire-{}", lock_testkit::key("session"));
        let ephemeral = zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all());
        killer.create(&marker, b"", &ephemeral).await.expect("marker node");
        drop(killer);
        let admin = zk::Client::connect(&self.server).await.expect("admin");
        eventually(Duration::from_secs(5), "session closed", || {
            let check = admin.check_stat(&marker);
            async move { matches!(check.await, Ok(None)) }
        })
        .await;
        self.proxy.blackhole(false);
        Ok(())
    }
}

mod suite {
    lock_testkit::conformance_tests!(super::factory().await);
}

/// The cases that lose a hold, with the user's session ended behind its back.
mod session_expired {
    use lock_testkit::{LoseBy, Loss};
    lock_testkit::conformance_tests!(@cases LoseBy::new(super::factory().await, Loss::ExpireSession);
        lost_signal_fires, lost_reaches_nested_guards);
}
