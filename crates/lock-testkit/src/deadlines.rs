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

use lock_core::{CountDownLatch, LeaderElection, LockBackend, Locker, MultiLock, RwLock, Semaphore};
use tokio::time::Instant;

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

fn answer<T, E: fmt::Debug>(r: Result<T, E>) -> Result<(), String> {
    r.map(|_| ()).map_err(|e| format!("{e:?}"))
}

macro_rules! case {
    ($op:literal, |$s:ident| $body:expr) => {
        Case { op: $op, run: |$s| Box::pin(async move { $body }) }
    };
}

/// Every operation of the deadline promise that a table can drive on any store.
pub const CASES: &[Case] = &[
    case!("Locker::try_lock", |s| {
        s.cut();
        (None, answer(s.locker.try_lock(&s.key).await))
    }),
    case!("Locker::with_lock", |s| {
        s.cut();
        (Some(WAIT), answer(s.locker.with_lock(&s.key, WAIT, |_| async {}).await))
    }),
    case!("LockRequest::acquire", |s| {
        s.cut();
        (Some(WAIT), answer(s.locker.lock(&s.key).wait(WAIT).acquire().await))
    }),
    case!("LockRequest::try_acquire", |s| {
        s.cut();
        (None, answer(s.locker.lock(&s.key).try_acquire().await))
    }),
    case!("LockRequest::run", |s| {
        s.cut();
        (Some(WAIT), answer(s.locker.lock(&s.key).wait(WAIT).run(|_| async {}).await))
    }),
    case!("LockGuard::release", |s| {
        let g = s.locker.try_lock(&s.key).await.expect("try").expect("free");
        s.cut();
        (None, answer(g.release().await))
    }),
    case!("LockGuard::renew", |s| {
        let g = s.locker.try_lock(&s.key).await.expect("try").expect("free");
        s.cut();
        let r = answer(g.renew(Duration::from_secs(5)).await);
        g.abandon();
        (None, r)
    }),
    case!("MultiLock::acquire", |s| {
        let m =
            MultiLock::new().with(&s.locker, format!("{}-a", s.key)).with(&s.locker, format!("{}-b", s.key));
        s.cut();
        (Some(WAIT), answer(m.acquire(WAIT, None).await))
    }),
    case!("MultiGuard::release", |s| {
        let m =
            MultiLock::new().with(&s.locker, format!("{}-a", s.key)).with(&s.locker, format!("{}-b", s.key));
        let g = m.acquire(WAIT, None).await.expect("both free");
        s.cut();
        (None, answer(g.release().await))
    }),
    case!("ReadRequest::acquire", |s| {
        let rw = RwLock::new(&s.locker, &s.key).expect("rwlock");
        s.cut();
        (Some(WAIT), answer(rw.read().wait(WAIT).acquire().await))
    }),
    case!("ReadRequest::try_acquire", |s| {
        let rw = RwLock::new(&s.locker, &s.key).expect("rwlock");
        s.cut();
        (None, answer(rw.read().try_acquire().await))
    }),
    case!("WriteRequest::acquire", |s| {
        let rw = RwLock::new(&s.locker, &s.key).expect("rwlock");
        s.cut();
        (Some(WAIT), answer(rw.write().wait(WAIT).acquire().await))
    }),
    case!("WriteRequest::try_acquire", |s| {
        let rw = RwLock::new(&s.locker, &s.key).expect("rwlock");
        s.cut();
        (None, answer(rw.write().try_acquire().await))
    }),
    case!("ReadGuard::release", |s| {
        let rw = RwLock::new(&s.locker, &s.key).expect("rwlock");
        let g = rw.read().try_acquire().await.expect("try").expect("free");
        s.cut();
        (None, answer(g.release().await))
    }),
    case!("WriteGuard::release", |s| {
        let rw = RwLock::new(&s.locker, &s.key).expect("rwlock");
        let g = rw.write().try_acquire().await.expect("try").expect("free");
        s.cut();
        (None, answer(g.release().await))
    }),
    case!("UpgradeableRequest::acquire", |s| {
        let rw = RwLock::new(&s.locker, &s.key).expect("rwlock");
        s.cut();
        (Some(WAIT), answer(rw.upgradeable_read().wait(WAIT).acquire().await))
    }),
    case!("UpgradeableRequest::try_acquire", |s| {
        let rw = RwLock::new(&s.locker, &s.key).expect("rwlock");
        s.cut();
        (None, answer(rw.upgradeable_read().try_acquire().await))
    }),
    case!("UpgradeableReadGuard::upgrade", |s| {
        let rw = RwLock::new(&s.locker, &s.key).expect("rwlock");
        let Some(mut g) = rw.upgradeable_read().try_acquire().await.ok().flatten() else {
            return (None, Ok(())); // a store that cannot upgrade answers at once; nothing to time
        };
        s.cut();
        let r = answer(g.upgrade(WAIT).await);
        g.abandon();
        (Some(WAIT), r)
    }),
    case!("UpgradeableReadGuard::try_upgrade", |s| {
        let rw = RwLock::new(&s.locker, &s.key).expect("rwlock");
        let Some(mut g) = rw.upgradeable_read().try_acquire().await.ok().flatten() else {
            return (None, Ok(()));
        };
        s.cut();
        let r = answer(g.try_upgrade().await);
        g.abandon();
        (None, r)
    }),
    case!("UpgradeableReadGuard::release", |s| {
        let rw = RwLock::new(&s.locker, &s.key).expect("rwlock");
        let Some(g) = rw.upgradeable_read().try_acquire().await.ok().flatten() else {
            return (None, Ok(()));
        };
        s.cut();
        (None, answer(g.release().await))
    }),
    case!("Semaphore::try_acquire", |s| {
        let sem = Semaphore::new(&s.locker, &s.key, 2).expect("semaphore");
        s.cut();
        (None, answer(sem.try_acquire().await))
    }),
    case!("Semaphore::available", |s| {
        let sem = Semaphore::new(&s.locker, &s.key, 2).expect("semaphore");
        s.cut();
        (None, answer(sem.available().await))
    }),
    case!("Semaphore::resize", |s| {
        let mut sem = Semaphore::new(&s.locker, &s.key, 2).expect("semaphore");
        s.cut();
        (None, answer(sem.resize(3).await))
    }),
    case!("Semaphore::stored_permits", |s| {
        let sem = Semaphore::new(&s.locker, &s.key, 2).expect("semaphore");
        s.cut();
        (None, answer(sem.stored_permits().await))
    }),
    case!("PermitRequest::acquire", |s| {
        let sem = Semaphore::new(&s.locker, &s.key, 2).expect("semaphore");
        s.cut();
        (Some(WAIT), answer(sem.acquire().wait(WAIT).acquire().await))
    }),
    case!("PermitRequest::try_acquire", |s| {
        let sem = Semaphore::new(&s.locker, &s.key, 2).expect("semaphore");
        s.cut();
        (None, answer(sem.acquire().try_acquire().await))
    }),
    case!("PermitRequest::acquire_many", |s| {
        let sem = Semaphore::new(&s.locker, &s.key, 3).expect("semaphore");
        s.cut();
        (Some(WAIT), answer(sem.acquire().wait(WAIT).acquire_many(2).await))
    }),
    case!("PermitRequest::try_acquire_many", |s| {
        let sem = Semaphore::new(&s.locker, &s.key, 3).expect("semaphore");
        s.cut();
        (None, answer(sem.acquire().try_acquire_many(2).await))
    }),
    case!("Permit::release", |s| {
        let sem = Semaphore::new(&s.locker, &s.key, 2).expect("semaphore");
        let p = sem.try_acquire().await.expect("try").expect("free");
        s.cut();
        (None, answer(p.release().await))
    }),
    case!("Permits::release", |s| {
        let sem = Semaphore::new(&s.locker, &s.key, 3).expect("semaphore");
        let p = sem.acquire().try_acquire_many(2).await.expect("try").expect("free");
        s.cut();
        (None, answer(p.release().await))
    }),
    case!("CountDownLatch::set_count", |s| {
        let latch = CountDownLatch::new(&s.locker, &s.key).expect("latch");
        s.cut();
        (None, answer(latch.set_count(2).await))
    }),
    case!("CountDownLatch::count_down", |s| {
        let latch = CountDownLatch::new(&s.locker, &s.key).expect("latch");
        latch.set_count(2).await.expect("set");
        s.cut();
        (None, answer(latch.count_down().await))
    }),
    case!("CountDownLatch::count", |s| {
        let latch = CountDownLatch::new(&s.locker, &s.key).expect("latch");
        latch.set_count(2).await.expect("set");
        s.cut();
        (None, answer(latch.count().await))
    }),
    case!("CountDownLatch::wait", |s| {
        let latch = CountDownLatch::new(&s.locker, &s.key).expect("latch");
        latch.set_count(2).await.expect("set");
        s.cut();
        (Some(WAIT), answer(latch.wait(WAIT).await))
    }),
    case!("CountDownLatch::delete", |s| {
        let latch = CountDownLatch::new(&s.locker, &s.key).expect("latch");
        latch.set_count(2).await.expect("set");
        s.cut();
        (None, answer(latch.delete().await))
    }),
    case!("LeaderElection::leader", |s| {
        let e = LeaderElection::new(&s.locker, &s.key, "me").expect("election");
        s.cut();
        (None, answer(e.leader().await))
    }),
    case!("Candidate::resign", |s| {
        let e = LeaderElection::new(&s.locker, &s.key, "me").expect("election");
        let c = e.campaign().expect("campaign");
        c.until_leader().await.expect("the only candidate leads");
        s.cut();
        (None, answer(c.resign().await))
    }),
    case!("LockBackend::inspect", |s| {
        s.cut();
        (None, answer(s.locker.backend().inspect(&s.key).await))
    }),
    case!("LockBackend::list", |s| {
        s.cut();
        (None, answer(s.locker.backend().list(&s.key, 10).await))
    }),
    case!("LockBackend::evict", |s| {
        let g = s.locker.try_lock(&s.key).await.expect("try").expect("free");
        let fence = g.fence().unwrap_or(lock_core::FencingToken(1));
        s.cut();
        let r = answer(s.locker.backend().evict(&s.key, fence).await);
        g.abandon();
        (None, r)
    }),
];

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
