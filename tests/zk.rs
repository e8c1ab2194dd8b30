//! The conformance suite on the zk backend, against the shared standalone ZooKeeper of this test
//! binary (or `LOCK_TEST_ZK_URL`): once without auth, once with digest auth, ACLs and a chroot.
use std::sync::{Arc, Weak};
use std::time::Duration;

use lock_testkit::{Client, ClientFaults, Factory, FaultResult, server};
use lock_zk::{ZkLock, zookeeper_client as zk};

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
}

/// A factory for `mode` on the shared server.
pub async fn factory(mode: Mode) -> ZkFactory {
    let hosts = server::external_url("zk").unwrap_or_else(|| server::shared_zk().connect_string());
    let connect = match mode {
        Mode::Plain => hosts,
        Mode::Secured => format!("{hosts}/dlock-secured"),
    };
    ZkFactory { mode, connect }
}

#[lock_core::async_trait]
impl Factory for ZkFactory {
    fn label(&self) -> String {
        format!("zk/{:?}", self.mode).to_lowercase()
    }

    async fn client(&self) -> Client {
        // The secured factory's chroot is made by its first client.
        let mut b = ZkLock::builder()
            .connect_string(&self.connect)
            .create_chroot(true)
            .root("/conformance")
            .session_timeout(SESSION);
        if let Mode::Secured = self.mode {
            b = b.auth(USER, PASSWORD);
        }
        let lock = Arc::new(b.build().await.expect("connect to zookeeper"));
        // Weak: a dropped client must close its session (the crash cases need it).
        let faults =
            Operator { mode: self.mode, connect: self.connect.clone(), holder: Arc::downgrade(&lock) };
        Client::with_faults(lock, faults)
    }

    fn lease(&self) -> Duration {
        SESSION
    }
}

/// An operator, with a session of its own, aimed at one client.
struct Operator {
    mode: Mode,
    connect: String,
    holder: Weak<ZkLock>,
}

impl Operator {
    async fn admin(&self) -> zk::Client {
        let mut c = zk::Client::connector().with_session_timeout(SESSION);
        if let Mode::Secured = self.mode {
            c = c.with_auth("digest", format!("{USER}:{PASSWORD}").as_bytes());
        }
        c.connect(&self.connect).await.expect("admin connects")
    }
}

#[lock_core::async_trait]
impl ClientFaults for Operator {
    /// Delete the node at the head of the key's queue (the holder's) from another session.
    async fn sever(&self, key: &str) -> FaultResult {
        let dir = self.holder.upgrade().expect("the holder is still alive").lock_dir(key);
        let admin = self.admin().await;
        let children = admin.list_children(&dir).await.expect("list the lock directory");
        let head = children
            .iter()
            .filter_map(|c| {
                c.rsplit_once("-lock-").and_then(|(_, seq)| seq.parse::<u64>().ok()).map(|s| (s, c))
            })
            .min()
            .map(|(_, c)| format!("{dir}/{c}"));
        let head = head.unwrap_or_else(|| panic!("sever: no lock node under {dir}"));
        admin.delete(&head, None).await.expect("delete the holder's node");
        Ok(())
    }
}

mod plain {
    lock_testkit::conformance_tests!(crate::factory(crate::Mode::Plain).await);
}

mod secured {
    lock_testkit::conformance_tests!(crate::factory(crate::Mode::Secured).await);
}
