//! Clients made from a URL, as an application makes them (the history and generative
//! schedules), and a server's URL aimed at a proxy in front of it.

// Each binary uses the part it needs.
#![allow(dead_code)]

use lock_core::async_trait;
use lock_testkit::{Client, Factory};

/// Clients built from a URL (each a separate connection or session).
pub struct UrlFactory {
    pub label: String,
    pub url: String,
}

#[async_trait]
impl Factory for UrlFactory {
    fn label(&self) -> String {
        self.label.clone()
    }
    async fn client(&self) -> Client {
        Client::new(dlock::from_url(&self.url).await.expect("client"))
    }
}

/// `url` of a server on `port` with `proxy`'s port instead: the same server through the proxy.
pub fn through(url: &str, port: u16, proxy: u16) -> String {
    url.replacen(&format!(":{port}/"), &format!(":{proxy}/"), 1)
}
