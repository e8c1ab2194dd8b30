//! The generative checker on a private nats-server (one per test: the nemesis faults it)
//! through a proxy: the server paused past the lease, killed and restarted with its store, the
//! network blackholed, every connection cut, latency added; an operator's force-unlock through
//! the fence. Every run must show no fence handed out twice and fences growing in real-time
//! order. (The classic history checker runs on NATS with every store, from its testing side:
//! the root's `cargo test --test history stores::nats`.)

use std::net::SocketAddr;
use std::time::Duration;

use lock_nats_testing::{NatsFactory, NatsServer};
use lock_testkit::Factory;
use lock_testkit::history::Nemesis;
use lock_testkit::history::generative::{self, Mix, Primitive};
use lock_testkit::history::nemesis::{Blackhole, Cut, ForceUnlock, KillRestart, Latency, Pause};
use lock_testkit::proxy::Proxy;
use lock_testkit::server::or_skip;

/// The bucket TTL of these runs: the checkers' lease (300 ms), so a crashed holder is
/// replaced within a lease and a fault of 700-900 ms outlasts it.
const TTL: Duration = Duration::from_millis(300);

/// A private server, a proxy in front of it, and clients of `bucket` through the proxy.
async fn setup(bucket: &str) -> Option<(NatsServer, Proxy, NatsFactory)> {
    let srv = or_skip("nats", NatsServer::start())?;
    let proxy = Proxy::start(SocketAddr::from(([127, 0, 0, 1], srv.port()))).await.expect("proxy");
    let f = NatsFactory::new(proxy.addr().to_string(), bucket, TTL);
    Some((srv, proxy, f))
}

/// CI's seeds, one per fault (`seed % 6`: none, pause, blackhole, cut, kill, latency), or the
/// seed `DLOCK_HISTORY_SEED` names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generative_under_faults() {
    let Some((srv, proxy, f)) = setup("generative").await else { return };
    let m = Mix { max_time: Duration::from_secs(3), operations: 1_500, ..Mix::default() }.from_env();
    let seeds: Vec<u64> = if std::env::var_os("DLOCK_HISTORY_SEED").is_some() {
        vec![generative::seed()]
    } else {
        (5_000..5_006).collect()
    };
    for seed in seeds {
        let (pause, kill) = (Pause(&srv, m.fault_period.1), KillRestart(&srv));
        let (blackhole, cut, latency) = (Blackhole(&proxy), Cut(&proxy), Latency(&proxy, TTL / 6));
        let nemesis: Option<&dyn Nemesis> = match seed % 6 {
            0 => None,
            1 => Some(&pause),
            2 => Some(&blackhole),
            3 => Some(&cut),
            4 => Some(&kill),
            _ => Some(&latency),
        };
        let r = generative::run(&f, &m, nemesis, seed).await;
        eprintln!("{r}");
        r.assert_ok(false);
    }
    // The semaphore and the read-write lock (built on the mutex here), without faults and with
    // the network blackholed.
    let m = Mix { max_time: Duration::from_secs(2), ..m };
    for (seed, faulted) in [(5_000, false), (5_002, true)] {
        let blackhole = Blackhole(&proxy);
        let nemesis: Option<&dyn Nemesis> = faulted.then_some(&blackhole);
        for (p, limit) in [(Primitive::Semaphore, 3), (Primitive::RwLock, 4)] {
            let r = generative::run_primitive(&f, p, &m, nemesis, seed).await;
            eprintln!("{r}");
            r.assert_ok(limit);
        }
    }
}

/// An operator's force-unlock through the fence every 5 ms for 700 ms after each 300 ms of
/// quiet: holds taken away without notice, and every grant's fence still new and larger.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generative_force_unlock() {
    let Some((_srv, _proxy, f)) = setup("force").await else { return };
    let operator = ForceUnlock::new(f.client().await.backend, Duration::from_millis(5));
    let m = Mix { fault_period: (Duration::from_millis(300), Duration::from_millis(700)), ..Mix::default() };
    let m = Mix { max_time: Duration::from_secs(3), operations: 1_500, ..m }.from_env();
    let r = generative::run(&f, &m, Some(&operator), 5_046).await;
    eprintln!("{r}");
    assert!(operator.evicted() > 0, "{r}: the operator evicted no hold");
    r.assert_ok(true);
}
