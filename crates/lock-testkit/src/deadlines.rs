//! The deadline promise as one property over a table: every public operation that reaches the
//! store answers by its deadline (or, where it takes none, by the store's response bound) plus
//! a stated grace, whatever the store does. Each row of [`CASES`] prepares what its operation
//! needs while the store answers, then cuts the client off (its connections blackholed by a
//! proxy: open and silent, the hardest stall, since nothing fails) and times the operation.
//!
//! A store's test binary runs the table with [`every_operation_answers_in_time`]; a new
//! operation is covered everywhere by adding one row. The operation names are those of
//! [`contracts::OPERATIONS`](crate::contracts::OPERATIONS), whose rows point here.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use lock_core::{LockBackend, Locker};
use tokio::time::Instant;

mod cases;

pub use cases::CASES;

use crate::factory::key;
use crate::proxy::Proxy;

/// The wait every operation that takes one is given.
pub const WAIT: Duration = Duration::from_millis(1000);

/// How late past its limit an operation may answer: the library's last look after a deadline
/// and what a loaded two-core machine adds.
pub const GRACE: Duration = Duration::from_millis(500);

type Boxed<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// One client behind its own proxy, on a fresh key: what a row prepares on and then cuts off.
pub struct Stage {
    /// The client's locker (its backend reaches the store through the proxy).
    pub locker: Locker,
    /// A key of the row's own.
    pub key: String,
    proxy: Proxy,
    cut_at: std::sync::Mutex<Option<Instant>>,
}

impl fmt::Debug for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Stage").field("key", &self.key).field("proxy", &self.proxy.addr()).finish()
    }
}

impl Stage {
    /// Blackhole the client's connections and start the clock: call it once the row's
    /// preparation is done, right before the timed operation.
    pub fn cut(&self) {
        self.proxy.blackhole(true);
        *self.cut_at.lock().expect("clock") = Some(Instant::now());
    }
}

/// A row's operation: prepare, [`Stage::cut`], run the operation once; its answer (`Ok` or an
/// error, as text) and the wait it was given (`None`: bound by the store's response bound).
pub type Run = for<'a> fn(&'a Stage) -> Boxed<'a, (Option<Duration>, Result<(), String>)>;

/// One row: the operation (as the contracts table names it) and how to run it.
pub struct Case {
    /// The operation's name in [`contracts::OPERATIONS`](crate::contracts::OPERATIONS).
    pub op: &'static str,
    /// How to prepare and run it.
    pub run: Run,
}

impl fmt::Debug for Case {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.op)
    }
}

/// One row's measurement.
#[derive(Debug)]
pub struct Timed {
    /// The operation.
    pub op: &'static str,
    /// Its limit: the wait it was given, or the store's response bound.
    pub limit: Duration,
    /// From the cut to the answer (`None`: the row prepared nothing to time).
    pub took: Option<Duration>,
    /// The answer.
    pub answer: Result<(), String>,
}

impl Timed {
    /// Whether it answered by its limit plus [`GRACE`].
    pub fn in_time(&self) -> bool {
        self.took.is_none_or(|t| t <= self.limit + GRACE)
    }
}

/// Run every row of [`CASES`] on a fresh client reaching `127.0.0.1:{port}` (named in `url`)
/// through a proxy of its own, and return each row's timing. `connect` builds a backend from a
/// URL (here one naming the proxy); `response` is the store's bound for a call without a
/// deadline. The rows run at once (each cuts off only its own client), so a table costs about
/// its slowest row, not their sum. An outer bound of a minute keeps a row that never answers
/// from hanging the run: it is measured as a minute.
pub async fn run_table<F, Fut>(url: &str, port: u16, connect: F, response: Duration) -> Vec<Timed>
where
    F: Fn(String) -> Fut,
    Fut: Future<Output = Arc<dyn LockBackend>>,
{
    let server = format!("127.0.0.1:{port}");
    assert!(url.contains(&server), "the URL does not name {server}");
    let mut stages = Vec::new();
    for case in CASES {
        let proxy = Proxy::start(server.parse().expect("host:port")).await.expect("proxy");
        let backend = connect(url.replacen(&server, &proxy.addr().to_string(), 1)).await;
        let stage = Stage {
            locker: Locker::new(backend),
            key: key(&format!("deadline-{}", case.op.replace("::", "-"))),
            proxy,
            cut_at: std::sync::Mutex::new(None),
        };
        stages.push((case, stage));
    }
    let mut rows = tokio::task::JoinSet::new();
    for (case, stage) in stages {
        rows.spawn(async move {
            let outer = Duration::from_secs(60);
            let (wait, answer) = match tokio::time::timeout(outer, (case.run)(&stage)).await {
                Ok(done) => done,
                Err(_) => (None, Err("no answer in a minute".into())),
            };
            let took = stage.cut_at.lock().expect("clock").map(|t| t.elapsed());
            stage.proxy.blackhole(false);
            Timed { op: case.op, limit: wait.unwrap_or(response), took, answer }
        });
    }
    let mut out: Vec<Timed> = rows.join_all().await;
    out.sort_by_key(|t| CASES.iter().position(|c| c.op == t.op));
    out
}

/// The property: every row of [`CASES`] answers by its limit plus [`GRACE`] on this store. A
/// row in `longer` has a longer bound stated for this store (the operation, the bound, and why:
/// each printed in every run, so a stated exception is never silent). Prints every row's figure.
pub async fn every_operation_answers_in_time<F, Fut>(
    label: &str,
    url: &str,
    port: u16,
    connect: F,
    response: Duration,
    longer: &[(&str, Duration, &str)],
) where
    F: Fn(String) -> Fut,
    Fut: Future<Output = Arc<dyn LockBackend>>,
{
    for (op, _, _) in longer {
        assert!(CASES.iter().any(|c| c.op == *op), "a longer bound for {op}, which the table lacks");
    }
    let mut rows = run_table(url, port, connect, response).await;
    let mut wrong = Vec::new();
    for r in &mut rows {
        let stated = longer.iter().find(|(op, _, _)| *op == r.op);
        if let Some((_, bound, _)) = stated {
            r.limit = *bound;
        }
        let took = r.took.map_or_else(|| "not timed".to_owned(), |t| format!("{t:.2?}"));
        println!(
            "deadlines {label}: {:<36} limit {:>7.2?} took {:>9} {}{}",
            r.op,
            r.limit,
            took,
            if r.answer.is_ok() { "ok" } else { "err" },
            stated.map_or(String::new(), |(_, _, why)| format!("  LONGER BOUND STATED: {why}")),
        );
        if !r.in_time() {
            wrong.push(format!("{} answered after {took} (limit {:.2?})", r.op, r.limit));
        }
    }
    assert!(wrong.is_empty(), "{label}: {}", wrong.join("; "));
}
