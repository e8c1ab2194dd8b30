//! The scale curve: 1 to 512 clients on one key, and on a key each, spread over up to four
//! processes (this binary's hidden `__clients` command), so that the figures include what a
//! store does with waiters it cannot see in one process. Each process reports its latency
//! histogram, its count per client and its backend calls; the parent merges them.

use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use dlock::Locker;
use hdrhistogram::Histogram;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout};
use tokio::time::Instant;

use super::Ctx;
use super::counting::Counting;
use crate::error::{BenchError, Result};
use crate::micros::{hist, us};
use crate::row::Row;

/// Processes the clients are spread over.
const PROCESSES: usize = 4;

/// Backend clients per process: one, as a service has one lock client (its pool) whatever
/// its number of concurrent requests, here its tasks. A waiting task may pin a connection
/// (MySQL and PostgreSQL waits block in the server), so 4 backends of at most 64 connections
/// (the user's pool and the holders') keep 512 tasks within the test kit's SQL connection
/// limits (MariaDB 500, PostgreSQL 400); 8 backends did not (54 calls per acquisition).
const BACKENDS_PER_PROCESS: usize = 1;

/// Lease of every hold: never expires during a run.
const LEASE: Duration = Duration::from_secs(30);

/// The longest a client waits: 512 clients on one key on the slowest store stay well within.
const WAIT: Duration = Duration::from_secs(60);

/// How long a process may take to connect its clients.
const START: Duration = Duration::from_secs(60);

/// One client process of a point, ready and waiting for `go`.
struct Worker {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    /// Whether it saw the lock the parent holds: false for a store local to a process.
    shares: bool,
}

impl Worker {
    async fn spawn(
        cx: &Ctx<'_>,
        key: &str,
        first: usize,
        clients: usize,
        shared: bool,
        ms: u64,
    ) -> Result<Self> {
        let exe = std::env::current_exe().map_err(BenchError::io("cannot find this executable"))?;
        let mut cmd = tokio::process::Command::new(exe);
        cmd.args(["__clients", "--url", &cx.target.url, "--key", key])
            .args(["--first", &first.to_string(), "--clients", &clients.to_string()])
            .args(["--backends", &clients.min(BACKENDS_PER_PROCESS).to_string(), "--ms", &ms.to_string()]);
        if shared {
            cmd.arg("--shared");
        }
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(BenchError::io("cannot start a client process"))?;
        let stdin = child.stdin.take().ok_or_else(|| BenchError::Worker("no stdin".into()))?;
        let stdout = child.stdout.take().ok_or_else(|| BenchError::Worker("no stdout".into()))?;
        let mut w = Worker { child, stdin, stdout: BufReader::new(stdout), shares: true };
        let line = tokio::time::timeout(START, w.line())
            .await
            .map_err(|_| BenchError::Worker(format!("not ready within {START:?}")))??;
        w.shares = match line.trim() {
            "ready shares" => true,
            "ready alone" => false,
            other => return Err(BenchError::Worker(format!("said {other:?}"))),
        };
        Ok(w)
    }

    async fn line(&mut self) -> Result<String> {
        let mut line = String::new();
        self.stdout.read_line(&mut line).await.map_err(BenchError::io("cannot read a client process"))?;
        Ok(line)
    }

    async fn go(&mut self) -> Result<()> {
        self.stdin.write_all(b"go\n").await.map_err(BenchError::io("cannot start a client process"))
    }

    /// The process's figures once its run is over.
    async fn result(mut self) -> Result<Value> {
        let line = self.line().await?;
        let _ = self.child.wait().await;
        serde_json::from_str(&line).map_err(|_| BenchError::Worker(format!("answered {line:?}")))
    }
}

/// Throughput, tail and fairness against the number of clients, on one key and on a key each.
pub async fn scale(cx: &Ctx<'_>) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    for shared in [true, false] {
        for &clients in cx.sizes.scale_clients {
            rows.push(point(cx, clients, shared).await?);
        }
    }
    Ok(rows)
}

/// One point of a curve: `clients` over up to [`PROCESSES`] processes, started together.
async fn point(cx: &Ctx<'_>, clients: usize, shared: bool) -> Result<Row> {
    let key = cx.key(if shared { "s1" } else { "sn" });
    let ms = u64::try_from(cx.sizes.scale_for.as_millis()).unwrap_or(u64::MAX);
    // The parent holds the shared key while the processes start: each says whether it sees the
    // hold, which tells a store local to one process (whose clients must then share one).
    let probe = Locker::new(cx.target.client().await?);
    let held = probe.lock(&key).lease(LEASE).try_acquire().await?;
    let mut procs = PROCESSES.min(clients);
    let mut workers = start(cx, &key, clients, procs, shared, ms).await?;
    if workers.iter().any(|w| !w.shares) && procs > 1 {
        drop(workers);
        procs = 1;
        workers = start(cx, &key, clients, procs, shared, ms).await?;
    }
    if let Some(g) = held {
        g.release().await?;
    }
    for w in &mut workers {
        w.go().await?;
    }
    let mut h = hist()?;
    let mut counts = Vec::new();
    let (mut total, mut calls, mut took_ms) = (0u64, 0u64, 0f64);
    for w in workers {
        let v = w.result().await?;
        if let Some(e) = v.get("error").and_then(Value::as_str) {
            return Err(BenchError::Worker(e.to_owned()));
        }
        for pair in v["hist"].as_array().into_iter().flatten() {
            h.saturating_record_n(pair[0].as_u64().unwrap_or(1), pair[1].as_u64().unwrap_or(0));
        }
        let c: Vec<u64> = v["counts"].as_array().into_iter().flatten().filter_map(Value::as_u64).collect();
        total += c.iter().sum::<u64>();
        counts.extend(c);
        calls += v["attempts"].as_u64().unwrap_or(0);
        took_ms = took_ms.max(v["ms"].as_f64().unwrap_or(0.0));
    }
    let curve = if shared { "one key" } else { "a key each" };
    let rate = total as f64 / (took_ms / 1000.0).max(f64::EPSILON);
    let name = format!("scale {curve} x{clients}");
    let mut row = Row::latency(cx.target, &name, "acquire wait", &h, Some(rate), cx.floor.pair_p50);
    row.attempts = (total > 0).then(|| calls as f64 / total as f64);
    row.extra.insert("curve".into(), format!("scale {curve}").into());
    row.extra.insert("x".into(), clients.into());
    row.extra.insert("processes".into(), procs.into());
    row.extra.insert("min_per_client".into(), counts.iter().copied().min().unwrap_or(0).into());
    row.extra.insert("max_per_client".into(), counts.iter().copied().max().unwrap_or(0).into());
    Ok(row)
}

/// `procs` processes with `clients` between them, the first ones taking the remainder.
async fn start(
    cx: &Ctx<'_>,
    key: &str,
    clients: usize,
    procs: usize,
    shared: bool,
    ms: u64,
) -> Result<Vec<Worker>> {
    let mut workers = Vec::with_capacity(procs);
    let mut first = 0;
    for p in 0..procs {
        let n = clients / procs + usize::from(p < clients % procs);
        workers.push(Worker::spawn(cx, key, first, n, shared, ms).await?);
        first += n;
    }
    Ok(workers)
}

/// The arguments of the hidden `__clients` command.
#[derive(clap::Args, Debug)]
pub struct ClientsArgs {
    #[arg(long)]
    url: String,
    #[arg(long)]
    key: String,
    /// Index of this process's first client (its key on the many-keys curve).
    #[arg(long)]
    first: usize,
    #[arg(long)]
    clients: usize,
    #[arg(long)]
    backends: usize,
    /// All clients on `key`, else each on `key-<index>`.
    #[arg(long)]
    shared: bool,
    #[arg(long)]
    ms: u64,
}

/// The hidden `__clients` command: connect, say `ready shares|alone`, wait for `go`, loop
/// acquire -> increment -> release for the run's duration, print the figures as one JSON line.
pub async fn clients(args: ClientsArgs) -> std::process::ExitCode {
    let answer = match run_clients(&args).await {
        Ok(v) => v,
        Err(e) => json!({ "error": e.chain() }),
    };
    println!("{answer}");
    std::process::ExitCode::SUCCESS
}

async fn run_clients(a: &ClientsArgs) -> Result<Value> {
    let mut backends = Vec::new();
    for _ in 0..a.backends.max(1) {
        let counting = Counting::new(dlock::from_url(&a.url).await?);
        backends.push((Locker::new(counting.backend()), counting));
    }
    // The parent holds the shared key now: a store that lets this process take it is local.
    let probe = &backends[0].0;
    let shares = match probe.lock(&a.key).lease(LEASE).try_acquire().await? {
        Some(g) => {
            g.release().await?;
            false
        }
        None => true,
    };
    println!("ready {}", if shares { "shares" } else { "alone" });
    let mut go = String::new();
    BufReader::new(tokio::io::stdin()).read_line(&mut go).await.map_err(BenchError::io("no go"))?;
    let attempts0: u64 = backends.iter().map(|(_, c)| c.attempts()).sum();
    let counter = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let stop = started + Duration::from_millis(a.ms);
    let mut tasks = Vec::new();
    for i in 0..a.clients {
        let locker = backends[i % backends.len()].0.clone();
        let key = if a.shared { a.key.clone() } else { format!("{}-{}", a.key, a.first + i) };
        let counter = counter.clone();
        tasks.push(tokio::spawn(async move {
            let mut h = hist()?;
            let mut n = 0u64;
            while Instant::now() < stop {
                let t0 = Instant::now();
                let g = locker.lock(&key).lease(LEASE).wait(WAIT).acquire().await?;
                h.saturating_record(us(t0.elapsed()));
                super::increment(&counter).await;
                n += 1;
                g.release().await?;
            }
            Ok::<_, BenchError>((h, n))
        }));
    }
    let mut h: Histogram<u64> = hist()?;
    let mut counts = Vec::new();
    for t in tasks {
        let (th, n) = t.await??;
        h.add(&th)?;
        counts.push(n);
    }
    let took = started.elapsed();
    let total: u64 = counts.iter().sum();
    let counted = counter.load(Ordering::SeqCst);
    // Within this process the unguarded increment shows a double grant; across processes the
    // contended scenario's and the test suite's checkers do.
    if a.shared && counted != total {
        return Err(BenchError::Exclusion { counter: counted, acquisitions: total });
    }
    let attempts: u64 = backends.iter().map(|(_, c)| c.attempts()).sum::<u64>() - attempts0;
    let pairs: Vec<[u64; 2]> =
        h.iter_recorded().map(|v| [v.value_iterated_to(), v.count_at_value()]).collect();
    Ok(json!({ "counts": counts, "hist": pairs, "attempts": attempts, "ms": took.as_secs_f64() * 1000.0 }))
}
