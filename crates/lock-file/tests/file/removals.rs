//! The file store under operators and inspectors: lock files removed while other processes are
//! being granted never make a fence repeat, and an inspection never makes an attempt fail.
//!
//! Every client is a `FileLock` of its own on one directory: separate open files exclude each
//! other as separate processes do.
//!
//! Run: `cargo test -p lock-file --test file removals::`.

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use lock_core::backend::Notes;
use lock_core::{LockBackend, Locker};
use lock_file::FileLock;
use tokio::time::Instant;

const CLIENTS: usize = 4;

/// A directory on tmpfs where there is one: a grant syncs the counter to disk twice, and a disk
/// busy with a build beside the tests would starve the cases of grants, not prove anything.
fn temp_dir(prefix: &str) -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    let mut b = tempfile::Builder::new();
    b.prefix(prefix);
    if shm.is_dir() { b.tempdir_in(shm) } else { b.tempdir() }.expect("temp dir")
}

fn locker(dir: &Path) -> Locker {
    let lock = FileLock::with_check_every(dir, Duration::from_millis(50)).expect("FileLock");
    Locker::new(Arc::new(lock))
}

/// Clients grant one key as fast as they can while a thread removes its lock file in a loop:
/// a holder then keeps a lock nobody else opens, so two grants can overlap, but every grant's
/// fence is still new. Before the counter had a serialisation of its own, a few seconds of this
/// handed one fence out twice (measured: once per run, every run).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fences_never_repeat_while_lock_files_are_removed() {
    let dir = temp_dir("lock-file-rm-");
    let key = "fenced";
    let lock_path = dir.path().join(lock_file::lock_file_name(key));
    let stop = Arc::new(AtomicBool::new(false));
    let removals = Arc::new(AtomicU64::new(0));
    let remover = {
        let (stop, removals, path) = (stop.clone(), removals.clone(), lock_path.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                if std::fs::remove_file(&path).is_ok() {
                    removals.fetch_add(1, Ordering::Relaxed);
                }
                std::thread::yield_now();
            }
        })
    };
    let until = Instant::now() + Duration::from_secs(3);
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        let locker = locker(dir.path());
        let stop = stop.clone();
        clients.push(tokio::spawn(async move {
            let (mut fences, mut errors) = (Vec::new(), Vec::new());
            while Instant::now() < until && !stop.load(Ordering::Relaxed) {
                let guard = match locker.try_lock(key).await {
                    Ok(Some(guard)) => guard,
                    Ok(None) => continue,
                    Err(e) => {
                        errors.push(e.to_string());
                        continue;
                    }
                };
                fences.push(guard.fence().expect("the file store fences").0);
                // A removal makes the release report the loss: expected here.
                let _ = guard.release().await;
            }
            (fences, errors)
        }));
    }
    let (mut seen, mut repeated, mut errors) = (HashSet::new(), Vec::new(), Vec::new());
    for c in clients {
        let (fences, failed) = c.await.expect("client");
        errors.extend(failed);
        for f in fences {
            if !seen.insert(f) {
                repeated.push(f);
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    remover.join().expect("remover");
    let removed = removals.load(Ordering::Relaxed);
    eprintln!(
        "{} grants, {removed} removals, {} repeated fences",
        seen.len() + repeated.len(),
        repeated.len()
    );
    assert!(seen.len() > 100, "too few grants to judge: {}", seen.len());
    assert!(removed > 10, "too few removals to judge: {removed}");
    assert!(repeated.is_empty(), "fences handed out twice: {repeated:?}");
    // A removal is the lock's loss, never a failed grant: every attempt answered.
    assert!(errors.is_empty(), "{} attempts failed, first: {:?}", errors.len(), errors.first());
}

/// Inspections (status, notes) of a free key run beside attempts on it: no attempt may answer
/// "held". Before, an inspection's shared probe of the lock file made 2-4 % of them do so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inspection_never_fails_an_attempt() {
    let dir = temp_dir("lock-file-probe-");
    let key = "inspected";
    let stop = Arc::new(AtomicBool::new(false));
    let inspector = {
        let backend = FileLock::new(dir.path()).expect("FileLock");
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                backend.inspect(key).await.expect("inspect");
                backend.note(key).await.expect("note");
                n += 1;
            }
            n
        })
    };
    let locker = locker(dir.path());
    let (mut granted, mut refused) = (0u32, 0u32);
    let until = Instant::now() + Duration::from_secs(2);
    while Instant::now() < until {
        match locker.try_lock(key).await.expect("try_lock") {
            Some(guard) => {
                granted += 1;
                guard.release().await.expect("release");
            }
            None => refused += 1,
        }
    }
    stop.store(true, Ordering::Relaxed);
    let inspections = inspector.await.expect("inspector");
    eprintln!("{granted} granted, {refused} refused, {inspections} inspections");
    assert!(
        inspections > 100 && granted > 100,
        "too little to judge: {inspections} inspections, {granted} grants"
    );
    assert_eq!(refused, 0, "a free key answered held to {refused} of {} attempts", granted + refused);
}
