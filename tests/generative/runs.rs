//! How a seed is run: which fault it picks, the mix, where the figures go, and the runs per
//! topology (through a proxy of its own, with the primitives' schedules, under an operator's
//! force-unlock, or over several servers without a proxy).

use std::io::Write as _;
use std::net::SocketAddr;
use std::time::Duration;

use lock_core::async_trait;
use lock_testkit::Factory;
use lock_testkit::history::Nemesis;
use lock_testkit::history::generative::{GenReport, Mix, Primitive, run, run_primitive, seed};
use lock_testkit::history::nemesis::{
    Blackhole, Cut, ForceUnlock, KillRestart, KillSessions, Latency, Pause,
};
use lock_testkit::proxy::Proxy;
use lock_testkit::server::FaultControl;
use lock_testkit::side::Revokes;

use crate::support::url::UrlFactory;

/// The faults, in the order a seed picks them (`seed % 7`).
pub const FAULTS: [&str; 7] = ["none", "pause", "blackhole", "cut", "kill", "latency", "session"];
/// CI's seeds: one per fault.
pub const CI_SEEDS: [u64; 7] = [5_000, 5_001, 5_002, 5_003, 5_004, 5_005, 5_006];
/// The latency fault: a third of the mix's lease each way, so a renewal's round trip eats most
/// of the lease's safety margin.
pub const LATENCY: Duration = Duration::from_millis(50);

/// The mix of one run; in a soak, `DLOCK_SOAK_OPERATIONS` is the total per backend and mode,
/// spread over the five faults.
pub fn mix() -> Mix {
    let m = Mix { max_time: Duration::from_secs(3), operations: 1_500, ..Mix::default() }.from_env();
    if std::env::var_os("DLOCK_SOAK_OPERATIONS").is_some() {
        Mix { operations: m.operations.div_ceil(FAULTS.len() as u64), ..m }
    } else {
        m
    }
}

/// Whether `seed` picks a fault (schedules with one fault of their own strike it then).
pub fn faulted(seed: u64) -> bool {
    FAULTS[(seed % FAULTS.len() as u64) as usize] != "none"
}

/// The seeds to run: the one given, random ones in a soak, else CI's.
pub fn seeds() -> Vec<u64> {
    if std::env::var_os("DLOCK_HISTORY_SEED").is_some() {
        return vec![seed()];
    }
    if std::env::var_os("DLOCK_SOAK_OPERATIONS").is_some() {
        let n = FAULTS.len() as u64;
        return (0..n).map(|i| seed() / n * n + i).collect();
    }
    CI_SEEDS.to_vec()
}

pub fn record(r: &GenReport) {
    eprintln!("{r}");
    record_line(&r.to_string());
}

pub fn record_line(line: &str) {
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("generative.txt");
    if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(path) {
        let _ = writeln!(f, "{line}");
    }
}

/// Runs every seed on clients made by `url_of` (given the proxy's port), each under the fault
/// its seed picks; `session` ends the clients' sessions from the server (`None`: the store
/// has no such command, and the network is blackholed instead).
pub async fn generative(
    label: &str,
    server: &(dyn FaultControl + Sync),
    port: u16,
    revokes: Revokes,
    session: Option<KillSessions<'_>>,
    url_of: impl Fn(u16) -> String,
) {
    let proxy = Proxy::start(SocketAddr::from(([127, 0, 0, 1], port))).await.expect("proxy");
    let f = UrlFactory { label: label.to_owned(), url: url_of(proxy.port()) };
    let m = mix();
    for seed in seeds() {
        let pause = Pause(server, m.fault_period.1);
        let (blackhole, cut, kill) = (Blackhole(&proxy), Cut(&proxy), KillRestart(server));
        let latency = Latency(&proxy, LATENCY);
        let (nemesis, revoked): (Option<&dyn Nemesis>, bool) =
            match FAULTS[(seed % FAULTS.len() as u64) as usize] {
                "none" => (None, false),
                "pause" => (Some(&pause), false),
                "blackhole" => (Some(&blackhole), false),
                "cut" => (Some(&cut), revokes.on_cut),
                "kill" => (Some(&kill), revokes.on_restart || revokes.on_cut),
                "latency" => (Some(&latency), false),
                _ => match &session {
                    Some(s) => (Some(s), revokes.on_session_kill),
                    None => (Some(&blackhole), false),
                },
            };
        let r = run(&f, &m, nemesis, seed).await;
        record(&r);
        r.assert_ok(revoked);
    }
    primitives(&f, &proxy).await;
}

/// The semaphore (3 permits) and read-write lock (4 reader slots, unless native) schedules, without faults
/// and with the network blackholed (CI's two seeds, or the seed given).
pub async fn primitives(f: &UrlFactory, proxy: &Proxy) {
    let m = Mix { max_time: Duration::from_secs(2), ..mix() };
    let seeds = if std::env::var_os("DLOCK_HISTORY_SEED").is_some() { seeds() } else { vec![5_005, 5_000] };
    for seed in seeds {
        let blackhole = Blackhole(proxy);
        let nemesis: Option<&dyn Nemesis> = faulted(seed).then_some(&blackhole);
        for (p, limit) in [(Primitive::Semaphore, 3), (Primitive::RwLock, 4)] {
            let r = run_primitive(f, p, &m, nemesis, seed).await;
            eprintln!("{r}");
            record_line(&r.to_string());
            r.assert_ok(limit);
        }
    }
}

/// An operator's force-unlock through the fence (`dlock unlock --force`: inspect, then evict
/// the hold with the fence shown) every 5 ms for 700 ms after each 300 ms of quiet: holds are
/// taken away without notice (only the fence protects), and every grant's fence must still be
/// new and larger than those granted before. CI's seed, or the seed given.
pub async fn force_unlock(f: &UrlFactory) {
    let operator = ForceUnlock::new(f.client().await.backend, Duration::from_millis(5));
    let m = Mix { fault_period: (Duration::from_millis(300), Duration::from_millis(700)), ..mix() };
    let seeds = if std::env::var_os("DLOCK_HISTORY_SEED").is_some() { seeds() } else { vec![5_046] };
    for seed in seeds {
        let before = operator.evicted();
        let r = run(f, &m, Some(&operator), seed).await;
        record(&r);
        assert!(operator.evicted() > before, "{r}: the operator evicted no hold");
        r.assert_ok(true);
    }
}

/// Topologies without a proxy in front (several servers): two seeds of CI's, one without faults
/// and under `fault`; `revokes`: the fault takes holds away without notice.
pub async fn without_proxy(f: &UrlFactory, fault: &dyn Nemesis, revokes: bool) {
    without_proxy_mix(f, &mix(), fault, revokes).await;
}

/// [`without_proxy`] with a mix of its own.
pub async fn without_proxy_mix(f: &UrlFactory, m: &Mix, fault: &dyn Nemesis, revokes: bool) {
    let seeds = if std::env::var_os("DLOCK_HISTORY_SEED").is_some() { seeds() } else { vec![5_005, 5_006] };
    for seed in seeds {
        let nemesis = faulted(seed).then_some(fault);
        let r = run(f, m, nemesis, seed).await;
        record(&r);
        r.assert_ok(revokes && nemesis.is_some());
    }
}

/// Several servers paused and resumed together.
pub struct PauseAll<'a>(pub Vec<&'a (dyn FaultControl + Sync)>, pub Duration);

#[async_trait]
impl Nemesis for PauseAll<'_> {
    fn name(&self) -> String {
        format!("{} servers paused {:?}", self.0.len(), self.1)
    }
    async fn strike(&self) {
        self.0.iter().for_each(|s| s.pause().expect("pause"));
    }
    async fn heal(&self) {
        self.0.iter().for_each(|s| s.resume().expect("resume"));
    }
}
