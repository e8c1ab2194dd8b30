//! The benchmark harness: the same scenarios on every backend and mode, through the same
//! `dyn LockBackend` path, each next to a raw floor measured in the same run.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use dlock::{
    AcquireRequest, Attempt, Capability, DynBackend, LockBackend, LockError, Locker, OwnerToken, RenewItem,
    Subscription,
};
use hdrhistogram::Histogram;
use tokio::time::Instant;

mod floor;
mod report;
mod targets;

use report::{Report, Row};
use targets::Target;

/// Which scenarios to run.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scenario {
    /// One client, acquire + release.
    Uncontended,
    /// N clients on one key (1, 8, 32).
    Contended,
    /// N clients on distinct keys.
    ManyKeys,
    /// Release -> blocked waiter holds.
    Handoff,
    /// K held locks renewed by the watchdog.
    Watchdog,
    /// A holder process killed; time until another client holds the lock.
    Crash,
    /// The seeds: 10 tasks x 1000 increments, and the flash sale.
    Seeds,
}

/// `dlock bench` arguments.
#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    /// Small sizes: the whole run finishes in about a minute (CI smoke run).
    #[arg(long)]
    pub quick: bool,
    /// Benchmark these backend URLs instead of starting local servers (repeatable).
    #[arg(long = "url")]
    pub urls: Vec<String>,
    /// Only targets whose name contains one of these (repeatable): memory, redis, mysql, zk, ...
    #[arg(long = "only")]
    pub only: Vec<String>,
    /// Scenarios to run (repeatable; default: all).
    #[arg(long = "scenario", value_enum)]
    pub scenarios: Vec<Scenario>,
    /// Report folder: results.jsonl, report.md and one SVG chart per scenario.
    #[arg(long, default_value = "results")]
    pub out: PathBuf,
}

/// Sizes of one run.
#[derive(Debug, Clone, Copy)]
struct Sizes {
    uncontended_ops: usize,
    contended_for: Duration,
    handoffs: usize,
    watchdog_locks: usize,
    watchdog_periods: u32,
    increments: u64,
    stock: (u64, u64),
}

impl Sizes {
    fn new(quick: bool) -> Self {
        if quick {
            Sizes {
                uncontended_ops: 500,
                contended_for: Duration::from_millis(400),
                handoffs: 30,
                watchdog_locks: 200,
                watchdog_periods: 2,
                increments: 100,
                stock: (1_000, 2_000),
            }
        } else {
            Sizes {
                uncontended_ops: 5_000,
                contended_for: Duration::from_secs(3),
                handoffs: 200,
                watchdog_locks: 10_000,
                watchdog_periods: 3,
                increments: 1_000,
                stock: (100_000, 200_000),
            }
        }
    }
}

fn hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 120_000_000, 3).unwrap_or_else(|_| unreachable!("static bounds are valid"))
}

fn us(d: Duration) -> u64 {
    (d.as_micros() as u64).max(1)
}

/// Entry point of `dlock bench`.
pub async fn main(args: BenchArgs) -> ExitCode {
    let sizes = Sizes::new(args.quick);
    let (targets, _servers, notes) = targets::discover(&args).await;
    for n in &notes {
        eprintln!("note: {n}");
    }
    if targets.is_empty() {
        eprintln!("dlock bench: no target to benchmark");
        return ExitCode::from(crate::EXIT_CONFIG);
    }
    let scenarios: Vec<Scenario> = if args.scenarios.is_empty() {
        vec![
            Scenario::Uncontended,
            Scenario::Contended,
            Scenario::ManyKeys,
            Scenario::Handoff,
            Scenario::Watchdog,
            Scenario::Crash,
            Scenario::Seeds,
        ]
    } else {
        args.scenarios.clone()
    };
    let mut report = Report::new(args.quick, notes);
    let pb = indicatif::ProgressBar::new((targets.len() * scenarios.len()) as u64);
    pb.set_style(
        indicatif::ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let mut failed = false;
    for t in &targets {
        let floor = match floor::measure(t, if args.quick { 300 } else { 3_000 }).await {
            Ok(f) => f,
            Err(e) => {
                eprintln!("{}: floor failed: {e}", t.name);
                failed = true;
                continue;
            }
        };
        report.floor(&t.name, &floor);
        for s in &scenarios {
            pb.set_message(format!("{} {:?}", t.name, s));
            match run_scenario(*s, t, &sizes, &floor).await {
                Ok(rows) => rows.into_iter().for_each(|r| report.push(r)),
                Err(e) => {
                    eprintln!("{} {:?}: {e}", t.name, s);
                    failed = true;
                }
            }
            pb.inc(1);
        }
    }
    pb.finish_and_clear();
    print!("{}", report.table());
    if let Err(e) = report.write(&args.out) {
        eprintln!("dlock bench: cannot write the report to {}: {e}", args.out.display());
        return ExitCode::from(1);
    }
    eprintln!("report written to {}", args.out.display());
    if failed { ExitCode::from(1) } else { ExitCode::SUCCESS }
}

async fn run_scenario(s: Scenario, t: &Target, z: &Sizes, floor: &floor::Floor) -> Result<Vec<Row>, String> {
    let key = |s: &str| format!("bench-{}-{s}-{}", std::process::id(), fastrand_u32());
    let e = |e: LockError| format!("{e}");
    match s {
        Scenario::Uncontended => {
            let l = Locker::new(t.client().await.map_err(e)?);
            let k = key("u");
            let mut h = hist();
            let start = Instant::now();
            for _ in 0..z.uncontended_ops {
                let t0 = Instant::now();
                let g = l.lock(&k).lease(Duration::from_secs(10)).try_acquire().await.map_err(e)?;
                let g = g.ok_or("uncontended key was held")?;
                g.release().await.map_err(e)?;
                h.record(us(t0.elapsed())).ok();
            }
            let ops = z.uncontended_ops as f64 / start.elapsed().as_secs_f64();
            Ok(vec![Row::latency(t, "uncontended", "acquire+release", &h, Some(ops), floor.pair_p50)])
        }
        Scenario::Contended => {
            let mut rows = Vec::new();
            for clients in [1usize, 8, 32] {
                rows.push(contended(t, clients, z.contended_for, &key("c"), floor, true).await?);
            }
            Ok(rows)
        }
        Scenario::ManyKeys => Ok(vec![contended(t, 8, z.contended_for, &key("m"), floor, false).await?]),
        Scenario::Handoff => handoff(t, z.handoffs, &key("h"), floor).await.map(|r| vec![r]),
        Scenario::Watchdog => watchdog(t, z, &key("w")).await.map(|r| vec![r]),
        Scenario::Crash => crash(t, &key("x")).await.map(|r| vec![r]),
        Scenario::Seeds => {
            let r1 = increments(t, z.increments, &key("inc")).await?;
            let r2 = flash_sale(t, z.stock, &key("sale")).await?;
            Ok(vec![r1, r2])
        }
    }
}

fn fastrand_u32() -> u32 {
    (OwnerToken::random().as_u128() & 0xffff_ffff) as u32
}

/// N clients, each on its own connection, loop acquire -> non-atomic increment -> release for
/// `dur`, on one key (`shared`) or on one key each.
async fn contended(
    t: &Target,
    clients: usize,
    dur: Duration,
    key: &str,
    floor: &floor::Floor,
    shared: bool,
) -> Result<Row, String> {
    let counter = Arc::new(AtomicU64::new(0));
    let stop = Instant::now() + dur;
    let mut tasks = Vec::new();
    for i in 0..clients {
        let l = Locker::new(t.client().await.map_err(|e| e.to_string())?);
        let k = if shared { key.to_owned() } else { format!("{key}-{i}") };
        let counter = counter.clone();
        tasks.push(tokio::spawn(async move {
            let mut h = hist();
            let mut n = 0u64;
            while Instant::now() < stop {
                let t0 = Instant::now();
                let g =
                    l.lock(&k).lease(Duration::from_secs(10)).wait(Duration::from_secs(30)).acquire().await?;
                h.record(us(t0.elapsed())).ok();
                let v = counter.load(Ordering::SeqCst);
                tokio::task::yield_now().await;
                counter.store(v + 1, Ordering::SeqCst);
                n += 1;
                g.release().await?;
            }
            Ok::<_, LockError>((h, n))
        }));
    }
    let mut h = hist();
    let mut counts = Vec::new();
    let started = Instant::now();
    for task in tasks {
        let (th, n) = task.await.map_err(|e| e.to_string())?.map_err(|e| e.to_string())?;
        h.add(&th).ok();
        counts.push(n);
    }
    let total: u64 = counts.iter().sum();
    let elapsed = started.elapsed().max(dur);
    if shared && counter.load(Ordering::SeqCst) != total {
        return Err(format!(
            "exclusion broken: counter {} != {total} acquisitions",
            counter.load(Ordering::SeqCst)
        ));
    }
    let name = if shared { format!("contended x{clients}") } else { format!("many keys x{clients}") };
    let mut row = Row::latency(
        t,
        &name,
        "acquire wait",
        &h,
        Some(total as f64 / elapsed.as_secs_f64()),
        floor.pair_p50,
    );
    row.extra.insert("min_per_client".into(), counts.iter().copied().min().unwrap_or(0).into());
    row.extra.insert("max_per_client".into(), counts.iter().copied().max().unwrap_or(0).into());
    row.extra.insert("exclusion_ok".into(), true.into());
    Ok(row)
}

/// Holder releases while a waiter is blocked: time from the release call to the waiter holding.
async fn handoff(t: &Target, reps: usize, key: &str, floor: &floor::Floor) -> Result<Row, String> {
    let e = |e: LockError| e.to_string();
    let a = Locker::new(t.client().await.map_err(e)?);
    let b = Locker::new(t.client().await.map_err(e)?);
    let mut h = hist();
    for _ in 0..reps {
        let g = a
            .lock(key)
            .lease(Duration::from_secs(10))
            .wait(Duration::from_secs(10))
            .acquire()
            .await
            .map_err(e)?;
        let (tx, rx) = tokio::sync::oneshot::channel();
        let b2 = b.clone();
        let k = key.to_owned();
        let waiter = tokio::spawn(async move {
            let r = b2.lock(&k).lease(Duration::from_secs(10)).wait(Duration::from_secs(10));
            let _ = tx.send(());
            let g = r.acquire().await;
            (Instant::now(), g)
        });
        let _ = rx.await;
        // Let the waiter make its first attempt and subscribe (or enter the server's queue).
        tokio::time::sleep(Duration::from_millis(5)).await;
        let released = Instant::now();
        g.release().await.map_err(e)?;
        let (got, g2) = waiter.await.map_err(|e| e.to_string())?;
        let g2 = g2.map_err(e)?;
        h.record(us(got.saturating_duration_since(released))).ok();
        g2.release().await.map_err(e)?;
    }
    Ok(Row::latency(t, "handoff", "release -> waiter holds", &h, None, floor.rtt_p50))
}

/// Counts renew calls and items going to the backend (a decorator over the same `dyn` path).
#[derive(Debug)]
struct Counting {
    inner: DynBackend,
    calls: AtomicUsize,
    items: AtomicUsize,
}

#[async_trait]
impl LockBackend for Counting {
    fn name(&self) -> &'static str {
        self.inner.name()
    }
    fn capabilities(&self) -> Capability {
        self.inner.capabilities()
    }
    async fn try_acquire(&self, req: &AcquireRequest<'_>) -> dlock::Result<Attempt> {
        self.inner.try_acquire(req).await
    }
    async fn release(&self, key: &str, owner: OwnerToken) -> dlock::Result<bool> {
        self.inner.release(key, owner).await
    }
    async fn renew(&self, items: &[RenewItem<'_>]) -> dlock::Result<Vec<bool>> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.items.fetch_add(items.len(), Ordering::Relaxed);
        self.inner.renew(items).await
    }
    fn identity(&self) -> String {
        self.inner.identity()
    }
    async fn inspect(&self, key: &str) -> dlock::Result<dlock::LockInfo> {
        self.inner.inspect(key).await
    }
    async fn leave_queue(&self, key: &str, owner: OwnerToken) -> dlock::Result<()> {
        self.inner.leave_queue(key, owner).await
    }
    async fn subscribe(&self, key: &str) -> dlock::Result<Option<Subscription>> {
        self.inner.subscribe(key).await
    }
}

fn cpu_time() -> Duration {
    // utime + stime of this process, in clock ticks (100 Hz on Linux).
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<u64> = after.split_whitespace().filter_map(|x| x.parse().ok()).collect();
    // Fields after the command: state(skipped, not numeric) ppid pgrp ... utime is field 14 overall.
    let ticks = f.get(10).copied().unwrap_or(0) + f.get(11).copied().unwrap_or(0);
    Duration::from_millis(ticks * 10)
}

/// K locks held under the watchdog for a few periods: renew round trips and CPU per period.
async fn watchdog(t: &Target, z: &Sizes, key: &str) -> Result<Row, String> {
    let inner = t.client().await.map_err(|e| e.to_string())?;
    if !inner.capabilities().renew {
        return Err("backend has no renew".into());
    }
    let k = t.watchdog_locks(z.watchdog_locks);
    let counting = Arc::new(Counting { inner, calls: AtomicUsize::new(0), items: AtomicUsize::new(0) });
    let lease = Duration::from_secs(3);
    let l = Locker::new(counting.clone()).with_watchdog_lease(lease).map_err(|e| e.to_string())?;
    let mut guards = Vec::with_capacity(k);
    for i in 0..k {
        match l.try_lock(format!("{key}-{i}")).await.map_err(|e| e.to_string())? {
            Some(g) => guards.push(g),
            None => return Err("fresh key was held".into()),
        }
    }
    let (c0, i0, cpu0) =
        (counting.calls.load(Ordering::Relaxed), counting.items.load(Ordering::Relaxed), cpu_time());
    let period = lease / 3;
    tokio::time::sleep(period * z.watchdog_periods).await;
    let (c1, i1, cpu1) =
        (counting.calls.load(Ordering::Relaxed), counting.items.load(Ordering::Relaxed), cpu_time());
    let lost = guards.iter().filter(|g| g.is_lost()).count();
    for g in guards {
        let _ = g.release().await;
    }
    let periods = f64::from(z.watchdog_periods);
    let mut row = Row::new(t, &format!("watchdog {k} locks"), "renew round trips per period");
    row.value = Some((c1 - c0) as f64 / periods);
    row.extra.insert("renewed_items_per_period".into(), ((i1 - i0) as f64 / periods).into());
    row.extra.insert("cpu_ms_per_period".into(), ((cpu1 - cpu0).as_secs_f64() * 1000.0 / periods).into());
    row.extra.insert("lost".into(), lost.into());
    if lost > 0 {
        return Err(format!("{lost} of {k} watchdog-held locks were lost"));
    }
    Ok(row)
}

/// A holder process is SIGKILLed; time until another client holds the lock.
async fn crash(t: &Target, key: &str) -> Result<Row, String> {
    use tokio::io::AsyncBufReadExt;
    if t.url.starts_with("memory") {
        // The in-process table dies with its process: there is nothing to recover.
        let mut row = Row::new(t, "crash recovery", "n/a: an in-process table dies with its holder");
        row.extra.insert("skipped".into(), true.into());
        return Ok(row);
    }
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let lease = Duration::from_secs(1);
    let mut child = tokio::process::Command::new(exe)
        .args(["hold", "--url", &t.url, "--key", key, "--lease", "1s"])
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| e.to_string())?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let mut line = String::new();
    let mut reader = tokio::io::BufReader::new(stdout);
    tokio::time::timeout(Duration::from_secs(30), reader.read_line(&mut line))
        .await
        .map_err(|_| "holder did not acquire within 30 s")?
        .map_err(|e| e.to_string())?;
    if !line.starts_with("held") {
        return Err(format!("holder said {line:?}"));
    }
    let l = Locker::new(t.client().await.map_err(|e| e.to_string())?);
    child.start_kill().map_err(|e| e.to_string())?;
    let killed = Instant::now();
    let g = l.lock(key).wait(Duration::from_secs(60)).acquire().await.map_err(|e| e.to_string())?;
    let took = killed.elapsed();
    g.release().await.map_err(|e| e.to_string())?;
    let _ = child.wait().await;
    let mut row = Row::new(t, "crash recovery", "holder SIGKILLed -> next holder (ms)");
    row.value = Some(took.as_secs_f64() * 1000.0);
    row.extra.insert("holder_lease_ms".into(), (lease.as_millis() as u64).into());
    Ok(row)
}

/// Seed: 10 tasks x N increments of a non-atomic counter under the lock must end exact.
async fn increments(t: &Target, n: u64, key: &str) -> Result<Row, String> {
    let counter = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..10 {
        let l = Locker::new(t.client().await.map_err(|e| e.to_string())?);
        let (k, c) = (key.to_owned(), counter.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..n {
                let g =
                    l.lock(&k).lease(Duration::from_secs(10)).wait(Duration::from_secs(60)).acquire().await?;
                let v = c.load(Ordering::SeqCst);
                tokio::task::yield_now().await;
                c.store(v + 1, Ordering::SeqCst);
                g.release().await?;
            }
            Ok::<_, LockError>(())
        }));
    }
    for task in tasks {
        task.await.map_err(|e| e.to_string())?.map_err(|e| e.to_string())?;
    }
    let got = counter.load(Ordering::SeqCst);
    if got != 10 * n {
        return Err(format!("10 x {n} increments ended at {got}"));
    }
    let mut row = Row::new(t, &format!("seed 10x{n} increments"), "increments/s");
    row.value = Some(got as f64 / started.elapsed().as_secs_f64());
    row.extra.insert("final".into(), got.into());
    Ok(row)
}

/// Seed 000's flash sale: every order takes 1 of sku1 and 2 of sku2 under the lock until sold
/// out; stock must end at exactly 0 with no oversell.
async fn flash_sale(t: &Target, stock: (u64, u64), key: &str) -> Result<Row, String> {
    #[derive(Default)]
    struct Stock {
        sku1: AtomicU64,
        sku2: AtomicU64,
    }
    let s = Arc::new(Stock::default());
    s.sku1.store(stock.0, Ordering::SeqCst);
    s.sku2.store(stock.1, Ordering::SeqCst);
    let orders = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let l = Locker::new(t.client().await.map_err(|e| e.to_string())?);
        let (k, s, orders) = (key.to_owned(), s.clone(), orders.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let g =
                    l.lock(&k).lease(Duration::from_secs(10)).wait(Duration::from_secs(60)).acquire().await?;
                // Read, yield, write: only the lock prevents overselling.
                let (a, b) = (s.sku1.load(Ordering::SeqCst), s.sku2.load(Ordering::SeqCst));
                let sold_out = a < 1 || b < 2;
                if !sold_out {
                    tokio::task::yield_now().await;
                    s.sku1.store(a - 1, Ordering::SeqCst);
                    s.sku2.store(b - 2, Ordering::SeqCst);
                    orders.fetch_add(1, Ordering::SeqCst);
                }
                g.release().await?;
                if sold_out {
                    return Ok::<_, LockError>(());
                }
            }
        }));
    }
    for task in tasks {
        task.await.map_err(|e| e.to_string())?.map_err(|e| e.to_string())?;
    }
    let (a, b, n) =
        (s.sku1.load(Ordering::SeqCst), s.sku2.load(Ordering::SeqCst), orders.load(Ordering::SeqCst));
    if a != 0 || b != 0 || n != stock.0 {
        return Err(format!("flash sale ended with sku1={a} sku2={b} after {n} orders"));
    }
    let mut row = Row::new(t, "seed flash sale x8", "orders/s");
    row.value = Some(n as f64 / started.elapsed().as_secs_f64());
    row.extra.insert("orders".into(), n.into());
    row.extra.insert("stock_left".into(), (a + b).into());
    Ok(row)
}
