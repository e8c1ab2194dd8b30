//! Waiters are served first come, first served: waiters queued one after another behind a holder
//! are granted in the order they queued, every time; a waiter killed in line, or a stale ticket
//! nobody holds, costs the next waiter a few milliseconds, never a timeout; a waiter that gives
//! up leaves no ticket; an uncontended acquisition stays as cheap as before.
//!
//! Every client is a `FileLock` of its own on one directory (separate open files exclude each
//! other as processes do), some shared by two waiters. The killed waiter is a child process:
//! this test binary run again as `child_waits_in_line`.
//!
//! Run: `cargo test -p lock-file --test file fifo:: -- --nocapture`.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_core::faults::Op;
use lock_core::{LockBackend, LockError, Locker};
use lock_file::FileLock;
use lock_testkit::hooked::answers_hooked;
use lock_testkit::{eventually, within};
use tokio::time::Instant;

/// The queue directory in the lock directory and a ticket's name in it (`<stem>.<20 digits>`).
const QUEUE: &str = ".queue";
/// The environment variable that makes this binary the child waiter (its value: the directory).
const CHILD_DIR: &str = "LOCK_FILE_FIFO_CHILD_DIR";
/// What a waiter behind a dead one may lose: a few milliseconds of listing and probing, far
/// from the 500 ms fallback poll of a waiter whose wake-up was lost, and from any timeout.
const DEAD_WAITER_COST: Duration = Duration::from_millis(100);
/// The most a chain of eight grants may take: a few milliseconds each, and under the 500 ms a
/// single lost wake-up costs.
const CHAIN_BOUND: Duration = Duration::from_millis(450);

/// A directory on tmpfs where there is one: grants sync the fence counter to disk.
fn temp_dir(prefix: &str) -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    let mut b = tempfile::Builder::new();
    b.prefix(prefix);
    if shm.is_dir() { b.tempdir_in(shm) } else { b.tempdir() }.expect("temp dir")
}

fn file_lock(dir: &Path) -> Arc<FileLock> {
    Arc::new(FileLock::with_check_every(dir, Duration::from_millis(50)).expect("FileLock"))
}

/// The ticket files in the queue directory.
fn tickets(dir: &Path) -> Vec<String> {
    match std::fs::read_dir(dir.join(QUEUE)) {
        Ok(entries) => entries.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect(),
        Err(_) => Vec::new(),
    }
}

/// The waiters `backend` counts in `key`'s line (`None`: the store counts none).
async fn in_line(backend: &FileLock, key: &str) -> Option<usize> {
    backend.inspect(key).await.expect("inspect").waiters
}

/// A waiter on `key` through `waiter` (up to 10 s): when it was granted (it releases at once).
fn granted_at(waiter: Locker, key: &'static str) -> tokio::task::JoinHandle<Result<Instant, LockError>> {
    tokio::spawn(async move {
        let g = waiter.lock(key).wait(Duration::from_secs(10)).acquire().await?;
        let at = Instant::now();
        g.release().await?;
        Ok(at)
    })
}

/// The waiter after an event at `since` was granted within [`DEAD_WAITER_COST`] of it; `what`
/// names the event in the figures and the failure.
async fn granted_soon(
    granted: tokio::task::JoinHandle<Result<Instant, LockError>>,
    since: Instant,
    what: &str,
) {
    let at = within(Duration::from_secs(15), "the waiter", granted).await.expect("task").expect("granted");
    let cost = at - since;
    eprintln!("granted {cost:?} after {what}");
    assert!(cost < DEAD_WAITER_COST, "{what} cost the next waiter {cost:?}");
}

/// Eight waiters over three clients queue one after another behind a holder: each starts once
/// the one before it stands in line. Released, they must be granted in that order, in every
/// round, and one after another without a lost wake-up (which would cost a waiter the 500 ms
/// of its fallback look). Before the queue (waiters raced for the freed lock file) the first
/// round came out shuffled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_are_granted_in_the_order_they_queued() {
    const WAITERS: usize = 8;
    const ROUNDS: usize = 5;
    let dir = temp_dir("lock-file-fifo-");
    let key = "fifo";
    let clients: Vec<Arc<FileLock>> = (0..3).map(|_| file_lock(dir.path())).collect();
    let holder = Locker::new(file_lock(dir.path()));
    let looker = file_lock(dir.path());
    for round in 0..ROUNDS {
        let held = holder.lock(key).try_acquire().await.expect("try").expect("free between rounds");
        let order = Arc::new(Mutex::new(Vec::new()));
        // A store without a line to count: a waiter is queued once its first attempt came back.
        let answered = Arc::new(AtomicUsize::new(0));
        let mut waiters = Vec::new();
        for i in 0..WAITERS {
            let counted = answered.clone();
            let hooked = answers_hooked(clients[i % clients.len()].clone(), move |c| {
                if c == Op::TryAcquire {
                    counted.fetch_add(1, Ordering::SeqCst);
                }
                Ok(())
            });
            let locker = Locker::new(Arc::new(hooked));
            let order = order.clone();
            waiters.push(tokio::spawn(async move {
                let g = locker.lock(key).wait(Duration::from_secs(20)).acquire().await?;
                order.lock().expect("order").push(i);
                g.release().await
            }));
            eventually(Duration::from_secs(10), "the waiter standing in line", || async {
                in_line(&looker, key).await.is_some_and(|n| n > i) || answered.load(Ordering::SeqCst) > i
            })
            .await;
        }
        let released = Instant::now();
        held.release().await.expect("release");
        for w in waiters {
            within(Duration::from_secs(30), "a waiter", w)
                .await
                .expect("task")
                .expect("granted and released");
        }
        let chain = released.elapsed();
        let order = order.lock().expect("order").clone();
        eprintln!("round {round}: granted in the order {order:?}, all within {chain:?}");
        assert_eq!(order, (0..WAITERS).collect::<Vec<_>>(), "round {round}: not first come, first served");
        assert!(chain < CHAIN_BOUND, "round {round}: {WAITERS} grants took {chain:?}: a wake-up was lost");
    }
    assert_eq!(tickets(dir.path()), Vec::<String>::new(), "finished waiters left tickets");
}

/// The child: waits in line for the key until the parent kills it.
#[tokio::test]
async fn child_waits_in_line() {
    let Some(dir) = std::env::var_os(CHILD_DIR) else { return };
    let locker = Locker::new(file_lock(Path::new(&dir)));
    let _ = locker.lock("killed").wait(Duration::from_secs(60)).acquire().await;
    panic!("the child waiter was granted or timed out instead of being killed");
}

/// Kills its child process when dropped, should the test fail before it does.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A waiter in line behind a child process that is killed (SIGKILL) while it waits: released,
/// the lock goes to the waiter behind it within a few milliseconds, and the dead waiter's
/// ticket is removed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_waiter_is_skipped_at_once() {
    let dir = temp_dir("lock-file-killed-");
    let key = "killed";
    let looker = file_lock(dir.path());
    let holder = Locker::new(file_lock(dir.path()));
    let held = holder.lock(key).try_acquire().await.expect("try").expect("free");
    let exe = std::env::current_exe().expect("this test binary");
    let child = Command::new(exe)
        .args(["fifo::child_waits_in_line", "--exact", "--nocapture"])
        .env(CHILD_DIR, dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("the child waiter");
    let mut child = Killed(child);
    eventually(Duration::from_secs(20), "the child standing in line", || async {
        in_line(&looker, key).await == Some(1)
    })
    .await;
    let waiter = Locker::new(file_lock(dir.path()));
    let granted = granted_at(waiter, key);
    eventually(Duration::from_secs(10), "the waiter standing in line behind the child", || async {
        in_line(&looker, key).await == Some(2)
    })
    .await;
    child.0.kill().expect("kill the child");
    child.0.wait().expect("the child's exit");
    let released = Instant::now();
    held.release().await.expect("release");
    granted_soon(granted, released, "the release, past a killed waiter").await;
    assert_eq!(tickets(dir.path()), Vec::<String>::new(), "the killed waiter's ticket stayed");
}

/// A stale ticket (a file in line that nobody locks: a waiter killed before anyone looked)
/// neither blocks a single attempt nor a waiting one, and is removed by the first that looks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_ticket_is_skipped_and_removed() {
    let dir = temp_dir("lock-file-stale-");
    let key = "stale";
    std::fs::create_dir_all(dir.path().join(QUEUE)).expect("queue dir");
    let stale = |n: u64| dir.path().join(QUEUE).join(format!("{key}.{n:020}"));
    std::fs::write(stale(1), b"").expect("a stale ticket");
    let locker = Locker::new(file_lock(dir.path()));
    let started = Instant::now();
    let g = locker.lock(key).wait(Duration::from_secs(10)).acquire().await.expect("granted");
    let cost = started.elapsed();
    g.release().await.expect("release");
    eprintln!("a wait past a stale ticket granted in {cost:?}");
    assert!(cost < DEAD_WAITER_COST, "a stale ticket cost {cost:?}");
    assert_eq!(tickets(dir.path()), Vec::<String>::new(), "the stale ticket stayed");
    std::fs::write(stale(7), b"").expect("another stale ticket");
    let g = locker.lock(key).try_acquire().await.expect("try").expect("a stale ticket refused a try");
    g.release().await.expect("release");
    assert_eq!(tickets(dir.path()), Vec::<String>::new(), "the stale ticket stayed");
}

/// The first in line dies while the lock is free (its ticket closed without being removed, as
/// the kernel closes it when a waiter is killed): nothing is released, yet the waiter behind it
/// is woken by the ticket's close and takes the lock within a few milliseconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_dying_first_in_line_wakes_the_next() {
    let dir = temp_dir("lock-file-dies-");
    let key = "dies";
    let looker = file_lock(dir.path());
    let holder = Locker::new(file_lock(dir.path()));
    let held = holder.lock(key).try_acquire().await.expect("try").expect("free");
    // A live waiter's ticket, as a waiter keeps it: open for writing and locked.
    std::fs::create_dir_all(dir.path().join(QUEUE)).expect("queue dir");
    let first = std::fs::File::create_new(dir.path().join(QUEUE).join(format!("{key}.{:020}", 1)))
        .expect("the first ticket");
    first.lock().expect("lock the first ticket");
    let waiter = Locker::new(file_lock(dir.path()));
    let granted = granted_at(waiter, key);
    eventually(Duration::from_secs(10), "the waiter standing in line behind the first", || async {
        in_line(&looker, key).await == Some(2)
    })
    .await;
    // Freed while the first in line still lives: the waiter behind it must not take it.
    held.release().await.expect("release");
    let info = looker.inspect(key).await.expect("inspect");
    assert!(!info.held && info.waiters == Some(2), "the second in line jumped the first: {info:?}");
    let died = Instant::now();
    drop(first);
    granted_soon(granted, died, "the first in line dying").await;
    assert_eq!(tickets(dir.path()), Vec::<String>::new(), "the dead waiter's ticket stayed");
}

/// Two waiters of one client with another client's waiter between them, which gives up: the
/// last one now waits for the first, and gets the lock as soon as the first lets it go, not at
/// its fallback look 500 ms later (before, only the first waiter of each client was woken, and
/// the last one still waited for the end of the ticket that had gone).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_whose_predecessor_gives_up_is_not_stranded() {
    let dir = temp_dir("lock-file-gives-up-");
    let key = "gives-up";
    let looker = file_lock(dir.path());
    let holder = Locker::new(file_lock(dir.path()));
    let held = holder.lock(key).try_acquire().await.expect("try").expect("free");
    let (same, other) = (Locker::new(file_lock(dir.path())), Locker::new(file_lock(dir.path())));
    let queued = |n: usize| {
        let looker = looker.clone();
        async move {
            eventually(Duration::from_secs(10), "the waiter standing in line", || async {
                in_line(&looker, key).await == Some(n)
            })
            .await
        }
    };
    let l = same.clone();
    let first = tokio::spawn(async move {
        let g = l.lock(key).wait(Duration::from_secs(10)).acquire().await?;
        let released = Instant::now();
        g.release().await?;
        Ok::<_, LockError>(released)
    });
    queued(1).await;
    let gives_up =
        tokio::spawn(async move { other.lock(key).wait(Duration::from_millis(300)).acquire().await });
    queued(2).await;
    let last = granted_at(same, key);
    queued(3).await;
    let gave_up = within(Duration::from_secs(5), "the waiter giving up", gives_up).await.expect("task");
    assert!(matches!(gave_up, Err(LockError::Timeout { .. })), "{gave_up:?}");
    held.release().await.expect("release");
    let released = within(Duration::from_secs(15), "the first", first).await.expect("task").expect("granted");
    granted_soon(last, released, "the first's release, behind a waiter that gave up").await;
}

/// A waiter that times out and one whose future is dropped leave no ticket, and the key goes
/// to the next taker at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_waiter_leaves_no_ticket() {
    let dir = temp_dir("lock-file-cancel-");
    let key = "cancelled";
    let looker = file_lock(dir.path());
    let holder = Locker::new(file_lock(dir.path()));
    let held = holder.lock(key).try_acquire().await.expect("try").expect("free");
    let waiter = Locker::new(file_lock(dir.path()));
    let timed_out = waiter.lock(key).wait(Duration::from_millis(200)).acquire().await;
    assert!(matches!(timed_out, Err(LockError::Timeout { .. })), "{timed_out:?}");
    assert_eq!(in_line(&looker, key).await, Some(0), "a timed-out waiter is still counted in line");
    assert_eq!(tickets(dir.path()), Vec::<String>::new(), "a timed-out waiter left its ticket");
    let dropped = tokio::spawn(async move { waiter.lock(key).wait(Duration::from_secs(30)).acquire().await });
    eventually(Duration::from_secs(10), "the waiter standing in line", || async {
        in_line(&looker, key).await == Some(1)
    })
    .await;
    dropped.abort();
    assert!(dropped.await.is_err_and(|e| e.is_cancelled()), "the waiter was cancelled");
    assert_eq!(tickets(dir.path()), Vec::<String>::new(), "a dropped waiter left its ticket");
    held.release().await.expect("release");
    let next = Locker::new(file_lock(dir.path()));
    next.lock(key)
        .try_acquire()
        .await
        .expect("try")
        .expect("the next taker finds it free")
        .release()
        .await
        .expect("release");
}

/// The cost of an uncontended acquisition (one listing of the empty line on top of the lock
/// file and the fence), printed: 2,000 waiting acquisitions and releases of a free key, and
/// 2,000 single attempts, with the queue directory there as after any contention.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uncontended_acquire_cost() {
    const N: u32 = 2_000;
    let dir = temp_dir("lock-file-cost-");
    std::fs::create_dir_all(dir.path().join(QUEUE)).expect("queue dir");
    let locker = Locker::new(file_lock(dir.path()));
    let started = std::time::Instant::now();
    for _ in 0..N {
        let g = locker.lock("idle").wait(Duration::from_secs(5)).acquire().await.expect("free");
        g.release().await.expect("release");
    }
    let waits = started.elapsed();
    let started = std::time::Instant::now();
    for _ in 0..N {
        let g = locker.lock("idle").try_acquire().await.expect("try").expect("free");
        g.release().await.expect("release");
    }
    let tries = started.elapsed();
    eprintln!("{N} uncontended acquire/release: {:?} each waiting, {:?} each trying", waits / N, tries / N);
    assert_eq!(tickets(dir.path()), Vec::<String>::new(), "an uncontended acquisition took a ticket");
}
