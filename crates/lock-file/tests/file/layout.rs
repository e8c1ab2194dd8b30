//! Issue 47 points 8 and 9 in the library: the lock file is `<dir>/<key>`, the file another
//! process's `flock` on that path takes; a lock file of an earlier version (`<key>.lock`) is
//! still honoured; a missing directory is made only when asked; and a hold is taken away
//! through its fence (`evict`), its holder told and the next fence larger.
//!
//! Run: `cargo test -p lock-file --test file layout::`. (flock(1) itself, through the `dlock` binary,
//! in `dlock-cli/tests/file_flock.rs`.)

use std::fs::File;
use std::sync::Arc;
use std::time::Duration;

use lock_core::backend::{Admin, Notes};
use lock_core::{FencingToken, LockBackend, LockError, Locker};
use lock_file::FileLock;

fn locker(dir: &std::path::Path) -> (Arc<FileLock>, Locker) {
    let backend = Arc::new(FileLock::with_check_every(dir, Duration::from_millis(20)).expect("FileLock"));
    (backend.clone(), Locker::new(backend))
}

#[tokio::test]
async fn another_processes_flock_on_the_key_path_excludes_and_is_seen() {
    let dir = tempfile::tempdir().expect("dir");
    let (backend, locker) = locker(dir.path());
    assert_eq!(lock_file::lock_file_name("job"), "job");
    // flock(1) on `<dir>/job`, as an open file of another process would hold it.
    let other = File::create(dir.path().join("job")).expect("create");
    other.lock().expect("flock");
    assert!(locker.lock("job").try_acquire().await.expect("try").is_none(), "granted past a flock");
    let info = backend.inspect("job").await.expect("inspect");
    assert!(info.held, "{info:?}");
    assert_eq!(info.fence, None, "a flock(1) holder has no fence: {info:?}");
    other.unlock().expect("unlock");
    let g = locker.lock("job").try_acquire().await.expect("try").expect("free after the flock");
    // And the other way round: dlock's hold refuses another open file's flock.
    let other = File::open(dir.path().join("job")).expect("open");
    assert!(other.try_lock().is_err(), "flocked past dlock's hold");
    assert_eq!(backend.inspect("job").await.expect("inspect").fence, g.fence());
    g.release().await.expect("release");
    assert!(other.try_lock().is_ok(), "not freed by the release");
}

#[tokio::test]
async fn a_lock_file_of_an_earlier_version_still_excludes() {
    let dir = tempfile::tempdir().expect("dir");
    let (backend, locker) = locker(dir.path());
    // A dlock of an earlier version holds `<key>.lock`.
    let old = File::create(dir.path().join("job.lock")).expect("create");
    old.lock().expect("flock");
    assert!(locker.lock("job").try_acquire().await.expect("try").is_none(), "granted past an old holder");
    assert!(backend.inspect("job").await.expect("inspect").held);
    old.unlock().expect("unlock");
    let g = locker.lock("job").try_acquire().await.expect("try").expect("free");
    assert!(old.try_lock().is_err(), "the old version's file is not locked by the new holder");
    g.release().await.expect("release");
}

#[tokio::test]
async fn a_missing_directory_is_made_only_when_asked() {
    let dir = tempfile::tempdir().expect("dir");
    let missing = dir.path().join("not/there");
    let url = format!("file://{}", missing.display());
    match FileLock::from_url(&url) {
        Err(LockError::InvalidConfig { reason }) => assert!(reason.contains("create=true"), "{reason}"),
        other => panic!("a missing directory: {other:?}"),
    }
    assert!(!missing.exists(), "made all the same");
    FileLock::from_url(&format!("{url}?create=true")).expect("made when asked");
    assert!(missing.is_dir());
    FileLock::from_url(&url).expect("there now");
    assert!(FileLock::from_url(&format!("{url}?create=maybe")).is_err(), "a flag's value is checked");
}

#[tokio::test]
async fn evict_takes_the_hold_named_by_its_fence_and_the_next_fence_is_larger() {
    let dir = tempfile::tempdir().expect("dir");
    let (_, holder) = locker(dir.path());
    let (operator, next) = locker(dir.path());
    let g = holder.lock("job").try_acquire().await.expect("try").expect("free");
    let fence = g.fence().expect("fenced");
    assert!(!operator.evict("job", FencingToken(fence.0 + 1)).await.expect("evict"), "another fence");
    assert!(!g.is_lost());
    assert!(operator.evict("job", fence).await.expect("evict"), "the hold shown");
    tokio::time::timeout(Duration::from_secs(5), g.lost()).await.expect("the holder is told");
    let n = next.lock("job").try_acquire().await.expect("try").expect("free after the eviction");
    assert!(n.fence() > Some(fence), "{:?} after {fence:?}", n.fence());
    assert!(!operator.evict("job", fence).await.expect("evict"), "a second copy evicts the next holder");
    assert!(!n.is_lost());
    let free_fence = n.fence().expect("fenced");
    n.release().await.expect("release");
    drop(g);
    // A key nobody holds, and a flock(1) holder (no fence, no lost signal), are left alone.
    assert!(!operator.evict("job", free_fence).await.expect("evict"), "a free key");
    let other = File::open(dir.path().join("job")).expect("open");
    other.lock().expect("flock");
    assert!(!operator.evict("job", free_fence).await.expect("evict"), "a flock(1) holder");
    assert!(dir.path().join("job").exists());
}

/// A holder killed with `kill -9` ends without removing its record (`<key>.held`, its fence and
/// the inode it locked); a `flock(1)` that takes the same file next must not pass for it.
#[tokio::test]
async fn a_killed_holders_record_does_not_make_a_flock_holder_evictable() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().expect("dir");
    let (backend, locker) = locker(dir.path());
    let g = locker.lock("job").try_acquire().await.expect("try").expect("free");
    let fence = g.fence().expect("fenced");
    g.release().await.expect("release");
    // What the killed holder left: the record as a grant writes it, locked by nobody.
    let lock = dir.path().join("job");
    let ino = std::fs::metadata(&lock).expect("lock file").ino();
    std::fs::write(dir.path().join("job.held"), format!("{} {ino}\n", fence.0)).expect("record");
    let other = File::open(&lock).expect("open");
    other.lock().expect("flock");
    let info = backend.inspect("job").await.expect("inspect");
    assert!(info.held);
    assert_eq!(info.fence, None, "flock(1) shown with the dead holder's fence");
    assert!(!backend.evict("job", fence).await.expect("evict"), "flock(1) evicted as the dead holder");
    assert!(lock.exists());
    // Nor is the note it left flock(1)'s.
    std::fs::write(dir.path().join("job.note"), "by the killed holder").expect("note");
    assert_eq!(backend.note("job").await.expect("note"), None, "flock(1) shown with a dead holder's note");
}

/// flock(1) opens the lock file read-only, so its release is a close without writing: the
/// waiter first in line is woken by it, not by its fallback poll (every 500 ms).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_is_woken_when_a_flock_holder_lets_go() {
    let dir = tempfile::tempdir().expect("dir");
    let (_, locker) = locker(dir.path());
    let other = File::create(dir.path().join("job")).expect("create");
    let other = {
        drop(other);
        File::open(dir.path().join("job")).expect("open read-only, as flock(1) does")
    };
    other.lock().expect("flock");
    let waiter = tokio::spawn(async move {
        let g = locker.lock("job").wait(Duration::from_secs(10)).acquire().await.expect("granted");
        let at = std::time::Instant::now();
        g.release().await.expect("release");
        at
    });
    // The waiter is in line and has looked: the lock file is open twice in this process,
    // by `other` and by the waiter's attempt (kept open between looks).
    let path = dir.path().join("job");
    let opened = || {
        let fds = std::fs::read_dir("/proc/self/fd").expect("/proc/self/fd").flatten();
        fds.filter(|fd| std::fs::read_link(fd.path()).is_ok_and(|l| l == path)).count()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while opened() < 2 {
        assert!(std::time::Instant::now() < deadline, "the waiter never looked");
        tokio::task::yield_now().await;
    }
    let released = std::time::Instant::now();
    drop(other);
    let granted = waiter.await.expect("waiter task");
    let took = granted - released;
    eprintln!("granted {took:?} after flock(1)'s release");
    assert!(took < Duration::from_millis(250), "the waiter polled: granted {took:?} after the release");
}
