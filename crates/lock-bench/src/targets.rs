//! What to benchmark: URLs given by the user, or servers started here with lock-testkit.

use std::any::Any;

use dlock::DynBackend;
use dlock::backend::UrlOptions;
use dlock::backend::registry::Descriptor;

use crate::BenchArgs;
use crate::error::Result;
use crate::peers::Peer;

/// One backend in one mode.
#[derive(Debug, Clone)]
pub struct Target {
    /// Display name, e.g. `redis/fair`.
    pub name: String,
    /// URL handed to `dlock::from_url` for every client.
    pub url: String,
    /// At most this many locks in the watchdog scenario, where a hold is costly for this
    /// target's store; `None`: as the scenario decides from the capabilities.
    pub watchdog_locks: Option<usize>,
    /// A peer crate on this target's server instead of this library.
    pub peer: Option<Peer>,
}

impl Target {
    fn new(name: impl Into<String>, url: impl Into<String>) -> Self {
        Target { name: name.into(), url: url.into(), watchdog_locks: None, peer: None }
    }

    /// `peer` on the server at `url` (the bare server URL, without this library's options).
    #[cfg(feature = "peers")]
    fn peer(name: &str, url: impl Into<String>, peer: Peer) -> Self {
        Target { peer: Some(peer), ..Target::new(name, url) }
    }

    /// A new independent client of this library (its own connection or session).
    pub async fn client(&self) -> Result<DynBackend> {
        Ok(dlock::from_url(&self.url).await?)
    }

    /// The URL's scheme (lowercase), which picks the raw client of the floor.
    pub fn scheme(&self) -> String {
        self.url.split_once("://").map_or("", |(s, _)| s).to_ascii_lowercase()
    }
}

/// `scheme/mode` for a user's URL: the name the report shows, nothing branches on it.
fn name_of(url: &str) -> String {
    let scheme = url.split_once("://").map_or(url, |(s, _)| s);
    let mode = UrlOptions::parse(url).ok().and_then(|mut o| o.take::<String>("mode").ok().flatten());
    match mode {
        Some(m) => format!("{scheme}/{m}"),
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
        make_local_stores(&mut targets, &mut servers, &mut notes);
        start_servers(&mut targets, &mut servers, &mut notes);
        start_topologies(args, &mut targets, &mut servers, &mut notes);
    }
    if !args.only.is_empty() {
        targets.retain(|t| args.only.iter().any(|o| t.name.contains(o.as_str())));
    }
    (targets, servers, notes)
}

/// Every registered store that needs no server (the in-process table, a lock directory): a
/// target per mode, kept alive with the run.
fn make_local_stores(
    targets: &mut Vec<Target>,
    keep: &mut Vec<Box<dyn Any + Send>>,
    notes: &mut Vec<String>,
) {
    for store in dlock::stores() {
        let Some(make) = store.local else { continue };
        match make() {
            Ok(local) => {
                targets.extend(per_mode(store, &local.url));
                keep.push(local.keep);
            }
            Err(e) => notes.push(format!("{} skipped: {e}", store.name)),
        }
    }
}

/// The targets of `store` at `url`: one per mode (`name/mode`), or one named by the store.
fn per_mode(store: &Descriptor, url: &str) -> Vec<Target> {
    let target =
        |name: String, url: String| Target { watchdog_locks: store.watchdog_locks, ..Target::new(name, url) };
    if store.modes.is_empty() {
        return vec![target(store.name.to_owned(), url.to_owned())];
    }
    let sep = if url.contains('?') { '&' } else { '?' };
    store.modes.iter().map(|m| target(format!("{}/{m}", store.name), format!("{url}{sep}mode={m}"))).collect()
}

/// The targets of the registered store `name` at `url` (its modes, its watchdog bound).
fn registered(name: &str, url: &str) -> Vec<Target> {
    dlock::stores().iter().find(|d| d.name == name).map_or_else(Vec::new, |d| per_mode(d, url))
}

/// Every store with a server: its testing side starts one, and its targets (a per mode, the
/// side's variants, the peers on the same server) run on it.
fn start_servers(targets: &mut Vec<Target>, servers: &mut Vec<Box<dyn Any + Send>>, notes: &mut Vec<String>) {
    for side in crate::sides::all() {
        let store = side.store();
        match side.start() {
            Ok(started) => {
                targets.extend(registered(store, &started.url));
                for (name, url) in &started.variants {
                    targets.extend(
                        registered(store, url).into_iter().map(|t| Target { name: name.clone(), ..t }),
                    );
                }
                targets.extend(peers_of(store, &started.url));
                servers.push(started.keep);
            }
            Err(e) => notes.push(format!("{store} skipped: {e}")),
        }
    }
    if crate::sides::all().len() < dlock::stores().iter().filter(|d| d.local.is_none()).count() {
        notes.push("built without some backend features; build with --features full for all".into());
    }
    if cfg!(not(feature = "peers")) {
        notes.push(
            "built without the peers (rslock, distributed-lock); build with --features peers for them".into(),
        );
    }
}

/// The other libraries' locks on the server of `store` at its URL `url`.
fn peers_of(store: &str, url: &str) -> Vec<Target> {
    let bare = url.split_once('?').map_or(url, |(u, _)| u);
    match store {
        #[cfg(feature = "peers")]
        "redis" => vec![
            Target::peer("rslock (redis)", bare, Peer::Rslock),
            Target::peer("distributed-lock (redis)", bare, Peer::DistributedLockRedis),
        ],
        #[cfg(feature = "peers")]
        "mysql" => vec![Target::peer("distributed-lock (mysql)", bare, Peer::DistributedLockMysql)],
        #[cfg(feature = "peers")]
        "postgres" => vec![Target::peer("distributed-lock (postgres)", bare, Peer::DistributedLockPostgres)],
        // Curator (a JVM) and kazoo (Python) on the same server; their scenarios say n/a
        // without a JDK or the venv.
        "zk" => vec![
            Target { peer: Some(Peer::Curator), ..Target::new("curator (zk)", url) },
            Target { peer: Some(Peer::Kazoo), ..Target::new("kazoo (zk)", url) },
        ],
        _ => {
            let _ = bare;
            Vec::new()
        }
    }
}

/// The opt-in Redis topologies: their families (what `--only` must contain to start one) and
/// target names. Each costs several servers and seconds to start, so neither the default run
/// nor `--quick` starts them.
const TOPOLOGIES: [(&str, &str); 3] = [
    ("redis-cluster", "redis-cluster/simple"),
    ("redis-sentinel", "redis-sentinel/simple"),
    ("redlock", "redlock-5/simple"),
];

/// Whether the run asks for the topology of `family`: `--topologies`, or an `--only` naming it.
fn wanted(args: &BenchArgs, family: &str) -> bool {
    args.topologies || args.only.iter().any(|o| o.contains(family))
}

// Without the redis feature nothing is pushed, which these lints would flag.
#[allow(unused_variables, clippy::ptr_arg)]
fn start_topologies(
    args: &BenchArgs,
    targets: &mut Vec<Target>,
    servers: &mut Vec<Box<dyn Any + Send>>,
    notes: &mut Vec<String>,
) {
    let [cluster, sentinel, redlock] = TOPOLOGIES.map(|(family, _)| wanted(args, family));
    if !(cluster || sentinel || redlock) {
        return;
    }
    #[cfg(not(feature = "redis"))]
    notes.push("the Redis topologies need the redis feature".into());
    #[cfg(feature = "redis")]
    {
        use lock_redis_testing::{RedisCluster, RedisSentinelSet, RedisServer};
        let [(_, cluster_name), (_, sentinel_name), (_, redlock_name)] = TOPOLOGIES;
        if cluster {
            // Masters only: the figures compare routing, not replication.
            match RedisCluster::start(3, 0) {
                Ok(c) => {
                    targets.push(Target::new(cluster_name, format!("{}?mode=simple", c.url())));
                    servers.push(Box::new(c));
                }
                Err(e) => notes.push(format!("{cluster_name} skipped: {e}")),
            }
        }
        if sentinel {
            match RedisSentinelSet::start() {
                Ok(s) => {
                    targets.push(Target::new(sentinel_name, format!("{}?mode=simple", s.url())));
                    servers.push(Box::new(s));
                }
                Err(e) => notes.push(format!("{sentinel_name} skipped: {e}")),
            }
        }
        if redlock {
            match (0..5).map(|_| RedisServer::start()).collect::<Result<Vec<_>, _>>() {
                Ok(masters) => {
                    let hosts: Vec<String> =
                        masters.iter().map(|m| format!("127.0.0.1:{}", m.port())).collect();
                    targets.push(Target::new(
                        redlock_name,
                        format!("redlock://{}/?mode=simple", hosts.join(",")),
                    ));
                    servers.push(Box::new(masters));
                }
                Err(e) => notes.push(format!("{redlock_name} skipped: {e}")),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{TOPOLOGIES, name_of, per_mode, wanted};
    use crate::BenchArgs;

    fn args(topologies: bool, only: &[&str]) -> BenchArgs {
        BenchArgs {
            quick: true,
            urls: Vec::new(),
            only: only.iter().map(|o| (*o).to_owned()).collect(),
            topologies,
            scenarios: Vec::new(),
            fast_servers: false,
            out: "results".into(),
        }
    }

    #[test]
    fn topologies_start_only_when_asked() {
        let families = |a: &BenchArgs| TOPOLOGIES.map(|(f, _)| wanted(a, f));
        // The default and --quick runs, and an --only for the single node, start none.
        assert_eq!(families(&args(false, &[])), [false; 3]);
        assert_eq!(families(&args(false, &["redis"])), [false; 3]);
        assert_eq!(families(&args(false, &["redis/simple", "memory"])), [false; 3]);
        assert_eq!(families(&args(true, &[])), [true; 3]);
        assert_eq!(families(&args(false, &["redis-cluster/simple"])), [true, false, false]);
        assert_eq!(families(&args(false, &["redis-sentinel", "redlock-5/simple"])), [false, true, true]);
        // Each target name contains its family, so the --only filter keeps what was started.
        assert!(TOPOLOGIES.iter().all(|(family, name)| name.contains(family)));
    }

    #[test]
    fn registered_stores_give_a_target_per_mode() {
        let names = |store: &str, url: &str| {
            let store = dlock::stores().iter().find(|d| d.name == store).expect("registered");
            per_mode(store, url).into_iter().map(|t| (t.name, t.url)).collect::<Vec<_>>()
        };
        assert_eq!(names("memory", "memory://bench"), [("memory".into(), "memory://bench".into())]);
        let mysql = names("mysql", "mysql://h/db?ssl-mode=disabled");
        assert_eq!(
            mysql[1],
            ("mysql/optimistic".into(), "mysql://h/db?ssl-mode=disabled&mode=optimistic".into())
        );
        assert_eq!(mysql.len(), 3);
    }

    #[test]
    fn user_urls_are_named_by_scheme_and_mode() {
        assert_eq!(name_of("redis://h:1/?mode=fair"), "redis/fair");
        assert_eq!(name_of("mysql://u:p@h/db?ssl-mode=required&mode=optimistic"), "mysql/optimistic");
        assert_eq!(name_of("zk://h:2181/root"), "zk");
        // A password is userinfo, not an option, whatever it contains.
        assert_eq!(name_of("redis://:a?mode=x@h:1/"), "redis");
    }
}
