//! Factories whose clients may each connect through a proxy of their own (the etcd and zk
//! suites): the proxies, kept for as long as the test runs, and the `cut_connection` hook
//! that closes a client's connection through its proxy.

// Each binary uses the part it needs.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::Arc;

use lock_core::backend::Mutex;
use lock_testkit::proxy::Proxy;
use lock_testkit::{FaultResult, Unsupported};

/// The proxies of a factory's clients; `None`: clients connect directly.
#[derive(Debug, Default)]
pub struct Proxies(Option<Mutex<Vec<Arc<Proxy>>>>);

impl Proxies {
    /// Clients connect directly.
    pub fn direct() -> Self {
        Proxies(None)
    }

    /// Every client connects through a proxy of its own.
    pub fn each() -> Self {
        Proxies(Some(Mutex::default()))
    }

    pub fn are_used(&self) -> bool {
        self.0.is_some()
    }

    /// A new client's proxy to `server` (`host:port`), when clients connect through proxies.
    pub async fn start(&self, server: &str) -> Option<Arc<Proxy>> {
        let all = self.0.as_ref()?;
        let server: SocketAddr = server.parse().expect("one host:port");
        let proxy = Arc::new(Proxy::start(server).await.expect("proxy"));
        all.lock().push(proxy.clone());
        Some(proxy)
    }
}

/// `cut_connection` of a client behind `proxy`: its connection closed, which it survives by
/// reconnecting; unsupported for a client that connects directly.
pub fn cut(proxy: Option<&Proxy>) -> FaultResult {
    let Some(proxy) = proxy else {
        return Err(Unsupported::new("cut_connection", "clients connect directly (no proxy to cut)"));
    };
    proxy.cut();
    Ok(())
}
