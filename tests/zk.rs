//! The conformance suite on the zk backend, against the shared standalone ZooKeeper of this test
//! binary (or `LOCK_TEST_ZK_URL`): once without auth, once with digest auth, ACLs and a chroot.
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_core::LockBackend;
use lock_testkit::{Factory, server};
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
    /// (address of the `Arc<dyn LockBackend>`, session id) of every client handed out. No
    /// `ZkLock` is kept: a dropped client must close its session (the crash cases need it).
    clients: Mutex<Vec<(usize, i64)>>,
}

/// A factory for `mode` on the shared server.
pub async fn factory(mode: Mode) -> ZkFactory {
    let hosts = server::external_url("zk").unwrap_or_else(|| server::shared_zk().connect_string());
    let connect = match mode {
        Mode::Plain => hosts,
        Mode::Secured => format!("{hosts}/dlock-secured"),
    };
    ZkFactory { mode, connect, clients: Mutex::default() }
}

fn addr(b: &Arc<dyn LockBackend>) -> usize {
    Arc::as_ptr(b).cast::<()>() as usize
}

impl ZkFactory {
    fn secured(&self) -> bool {
        matches!(self.mode, Mode::Secured)
    }

    async fn open(&self) -> ZkLock {
        // The secured factory's chroot is made by its first client.
        let mut b = ZkLock::builder()
            .connect_string(&self.connect)
            .create_chroot(true)
            .root("/conformance")
            .session_timeout(SESSION);
        if self.secured() {
            b = b.auth(USER, PASSWORD);
        }
        b.build().await.expect("connect to zookeeper")
    }

    /// A plain client (another session) acting as an operator.
    async fn admin(&self) -> zk::Client {
        let mut c = zk::Client::connector().with_session_timeout(SESSION);
        if self.secured() {
            c = c.with_auth("digest", format!("{USER}:{PASSWORD}").as_bytes());
        }
        c.connect(&self.connect).await.expect("admin connects")
    }
}

#[lock_core::async_trait]
impl Factory for ZkFactory {
    fn label(&self) -> String {
        format!("zk/{:?}", self.mode).to_lowercase()
    }

    async fn client(&self) -> Arc<dyn LockBackend> {
        let lock = self.open().await;
        let sid = lock.session_id();
        let b: Arc<dyn LockBackend> = Arc::new(lock);
        self.clients.lock().unwrap_or_else(|e| e.into_inner()).push((addr(&b), sid));
        b
    }

    /// Delete the holder's node from another session (an operator's `delete`), behind its back.
    async fn sever(&self, holder: &Arc<dyn LockBackend>, key: &str) -> bool {
        let a = addr(holder);
        let clients = self.clients.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let Some(&(_, sid)) = clients.iter().rev().find(|(p, _)| *p == a) else { return false };
        let dir = format!("/conformance/{}", lock_zk::encode_key(key));
        let admin = self.admin().await;
        let mut deleted = false;
        for child in admin.list_children(&dir).await.unwrap_or_default() {
            let path = format!("{dir}/{child}");
            if let Ok(Some(stat)) = admin.check_stat(&path).await
                && stat.ephemeral_owner == sid
            {
                deleted |= admin.delete(&path, None).await.is_ok();
            }
        }
        deleted
    }

    fn lease(&self) -> Duration {
        SESSION
    }
}

mod plain {
    lock_testkit::conformance_tests!(crate::factory(crate::Mode::Plain).await);
}

mod secured {
    lock_testkit::conformance_tests!(crate::factory(crate::Mode::Secured).await);
}
