//! What to benchmark: URLs given by the user, or servers started here with lock-testkit.

use std::any::Any;

use dlock::{DynBackend, LockError};

use super::BenchArgs;

/// One backend in one mode.
#[derive(Debug, Clone)]
pub struct Target {
    /// Display name, e.g. `redis/fair`.
    pub name: String,
    /// URL handed to `dlock::from_url` for every client.
    pub url: String,
}

impl Target {
    fn new(name: impl Into<String>, url: impl Into<String>) -> Self {
        Target { name: name.into(), url: url.into() }
    }

    /// A new independent client (its own connection or session).
    pub async fn client(&self) -> Result<DynBackend, LockError> {
        dlock::from_url(&self.url).await
    }

    /// How many locks the watchdog scenario holds: a pessimistic MySQL lock pins one of the
    /// pool's 32 connections each, and ZooKeeper creates cost a disk write each.
    pub fn watchdog_locks(&self, wanted: usize) -> usize {
        if self.name.contains("pessimistic") {
            wanted.min(24)
        } else if self.name.starts_with("zk") || self.name.starts_with("mysql") {
            wanted.min(1_000)
        } else {
            wanted
        }
    }
}

fn name_of(url: &str) -> String {
    let scheme = url.split_once("://").map_or(url, |(s, _)| s);
    match url.split_once("mode=") {
        Some((_, m)) => format!("{scheme}/{}", m.split('&').next().unwrap_or(m)),
        None => scheme.to_owned(),
    }
}

/// The targets, the servers to keep alive while they are used, and notes for the report.
pub async fn discover(args: &BenchArgs) -> (Vec<Target>, Vec<Box<dyn Any + Send>>, Vec<String>) {
    let mut targets = Vec::new();
    let mut servers: Vec<Box<dyn Any + Send>> = Vec::new();
    let mut notes = Vec::new();
    if !args.urls.is_empty() {
        targets.extend(args.urls.iter().map(|u| Target::new(name_of(u), u.clone())));
    } else {
        targets.push(Target::new("memory", "memory://bench"));
        start_servers(&mut targets, &mut servers, &mut notes);
    }
    if !args.only.is_empty() {
        targets.retain(|t| args.only.iter().any(|o| t.name.contains(o.as_str())));
    }
    (targets, servers, notes)
}

// Without backend features nothing is pushed, which these lints would flag.
#[allow(unused_variables, clippy::ptr_arg)]
fn start_servers(targets: &mut Vec<Target>, servers: &mut Vec<Box<dyn Any + Send>>, notes: &mut Vec<String>) {
    #[cfg(feature = "redis")]
    match lock_testkit::server::RedisServer::start() {
        Ok(s) => {
            for mode in ["simple", "reentrant", "fair"] {
                targets.push(Target::new(format!("redis/{mode}"), format!("{}?mode={mode}", s.url())));
            }
            servers.push(Box::new(s));
        }
        Err(e) => notes.push(format!("redis skipped: {e}")),
    }
    #[cfg(feature = "mysql")]
    match lock_testkit::server::MariaDbServer::start() {
        Ok(s) => {
            for mode in ["pessimistic", "optimistic"] {
                targets.push(Target::new(format!("mysql/{mode}"), format!("{}?mode={mode}", s.url())));
            }
            servers.push(Box::new(s));
        }
        Err(e) => notes.push(format!("mysql skipped: {e}")),
    }
    #[cfg(feature = "zk")]
    // The default fsync setting: the figures compare with Curator's on a real disk write path.
    match lock_testkit::server::ZkServer::start_with(&["forceSync=yes"]) {
        Ok(s) => {
            targets.push(Target::new("zk", format!("zk://{}/dlock-bench", s.connect_string())));
            servers.push(Box::new(s));
        }
        Err(e) => notes.push(format!("zk skipped: {e}")),
    }
    if cfg!(not(all(feature = "redis", feature = "mysql", feature = "zk"))) {
        notes.push("built without some backend features; build with --features full for all".into());
    }
}
