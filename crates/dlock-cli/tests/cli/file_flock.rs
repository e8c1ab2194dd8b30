//! Issue 47 points 9 and 8 on `file://`, through the real `dlock` binary and the real
//! flock(1): `dlock run --url file:///dir --key job` and `flock /dir/job` exclude each other
//! both ways, a missing directory is an error unless `?create=true` asks for it, and
//! `dlock unlock --force` takes a dlock holder's lock away (its command is told, the next fence
//! is larger) but leaves a flock(1) holder alone.
//!
//! Commands that hold wait for a file the test creates (`$D/go`), so "still holding" is a
//! state the test controls, not a race against a sleep.
//!
//! Run: `LOCK_TEST_REQUIRE=1 cargo test -p dlock-cli --test cli file_flock::`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::common;

use common::{dlock, wait_exit, wait_for};

const FLOCK: &str = "/usr/bin/flock";

/// A child killed when the test ends, should it fail before the child exits: an orphan left
/// waiting for a `go` file in a removed directory would hold the test's output open forever.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        if self.0.try_wait().ok().flatten().is_none() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// A lock directory, and the `file://` URL of it.
fn locks(dir: &Path) -> (PathBuf, String) {
    let locks = dir.join("locks");
    std::fs::create_dir(&locks).expect("locks dir");
    let url = format!("file://{}", locks.display());
    (locks, url)
}

/// Writes `$D/<tag>` (with the fence dlock exported, if any) and waits for `$D/go`.
fn holds_until_go(tag: &str) -> String {
    format!(
        "echo \"${{DLOCK_FENCING_TOKEN:-none}}\" > \"$D/{tag}.tmp\" && mv \"$D/{tag}.tmp\" \"$D/{tag}\"; \
         while [ ! -e \"$D/go\" ]; do sleep 0.02; done"
    )
}

/// `dlock run --url <url> --key <key> <extra> -- sh -c <body>` with `D` = `dir`.
fn dlock_run(dir: &Path, url: &str, key: &str, extra: &[&str], body: &str) -> Reaped {
    let child = Command::new(env!("CARGO_BIN_EXE_dlock"))
        .args(["run", "--url", url, "--key", key])
        .args(extra)
        .args(["--", "sh", "-c", body])
        .env("D", dir)
        .stdin(Stdio::null())
        .spawn()
        .expect("spawn dlock run");
    Reaped(child)
}

/// `flock <args> <path> sh -c <body>` with `D` = `dir`.
fn flock(dir: &Path, args: &[&str], path: &Path, body: &str) -> Reaped {
    let child = Command::new(FLOCK)
        .args(args)
        .arg(path)
        .args(["sh", "-c", body])
        .env("D", dir)
        .stdin(Stdio::null())
        .spawn()
        .expect("spawn flock(1)");
    Reaped(child)
}

fn flock_now(args: &[&str], path: &Path) -> Output {
    Command::new(FLOCK).args(args).arg(path).arg("true").stdin(Stdio::null()).output().expect("run flock(1)")
}

/// What a command wrote to `$D/<tag>`, once it has.
fn written(dir: &Path, tag: &str) -> String {
    let path = dir.join(tag);
    wait_for(&format!("{tag} starts"), Duration::from_secs(20), || path.exists());
    std::fs::read_to_string(path).expect("read").trim().to_owned()
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

#[test]
fn a_dlock_holder_refuses_flock_on_the_same_path() {
    let dir = tempfile::tempdir().expect("tmp");
    let (locks, url) = locks(dir.path());
    let mut held = dlock_run(dir.path(), &url, "job", &[], &holds_until_go("held"));
    written(dir.path(), "held");
    let o = flock_now(&["-n", "-E", "99"], &locks.join("job"));
    assert_eq!(o.status.code(), Some(99), "flock -n got /dir/job while dlock held job: {}", text(&o));
    let o = flock_now(&["-s", "-n", "-E", "99"], &locks.join("job"));
    assert_eq!(o.status.code(), Some(99), "flock -s -n got it too: {}", text(&o));
    std::fs::write(dir.path().join("go"), "").expect("go");
    assert_eq!(wait_exit(&mut held.0, Duration::from_secs(20)).code(), Some(0));
    let o = flock_now(&["-n", "-E", "99"], &locks.join("job"));
    assert_eq!(o.status.code(), Some(0), "not free after dlock's release: {}", text(&o));
}

#[test]
fn a_flock_holder_refuses_dlock_then_lets_a_waiting_dlock_in() {
    let dir = tempfile::tempdir().expect("tmp");
    let (locks, url) = locks(dir.path());
    let mut f = flock(dir.path(), &[], &locks.join("job"), &holds_until_go("flocked"));
    written(dir.path(), "flocked");
    let o = dlock(&["run", "--url", &url, "--key", "job", "--wait", "0", "--", "true"]);
    assert_eq!(o.status.code(), Some(75), "dlock ran past flock(1)'s hold: {}", text(&o));
    let o = dlock(&["status", "--url", &url, "--key", "job"]);
    assert_eq!(o.status.code(), Some(1), "status of a key flock(1) holds: {}", text(&o));
    // A dlock that waits gets it once flock(1) lets go.
    let mut waiting = dlock_run(dir.path(), &url, "job", &["--wait", "30s"], "echo ran > \"$D/waited\"");
    std::thread::sleep(Duration::from_millis(300));
    assert!(!dir.path().join("waited").exists(), "ran while flock(1) held the lock");
    let released = Instant::now();
    std::fs::write(dir.path().join("go"), "").expect("go");
    assert_eq!(wait_exit(&mut f.0, Duration::from_secs(20)).code(), Some(0));
    assert_eq!(wait_exit(&mut waiting.0, Duration::from_secs(20)).code(), Some(0));
    eprintln!("the waiting dlock ran {:?} after flock(1) released", released.elapsed());
    assert_eq!(written(dir.path(), "waited"), "ran");
}

#[test]
fn a_missing_directory_is_an_error_unless_create_is_asked() {
    let dir = tempfile::tempdir().expect("tmp");
    let missing = dir.path().join("no/such/dir");
    let url = format!("file://{}", missing.display());
    let o = dlock(&["run", "--url", &url, "--key", "job", "--", "true"]);
    assert_eq!(o.status.code(), Some(64), "{}", text(&o));
    assert!(text(&o).contains("does not exist") && text(&o).contains("create=true"), "{}", text(&o));
    assert!(!missing.exists(), "made all the same");
    let o = dlock(&["run", "--url", &format!("{url}?create=true"), "--key", "job", "--", "true"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(missing.is_dir());
}

#[test]
fn unlock_force_takes_a_dlock_hold_away_and_the_next_fence_is_larger() {
    let dir = tempfile::tempdir().expect("tmp");
    let (_, url) = locks(dir.path());
    let url = format!("{url}?check_every=50ms");
    let mut held = dlock_run(dir.path(), &url, "job", &[], &holds_until_go("held"));
    let fence: u64 = written(dir.path(), "held").parse().expect("a fence");
    let o = dlock(&["unlock", "--url", &url, "--key", "job", "--force", "--yes"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("evicted holder"), "{}", text(&o));
    // The holder learns it at its next check and stops its command: exit 76 (lost).
    assert_eq!(wait_exit(&mut held.0, Duration::from_secs(20)).code(), Some(76));
    let o = dlock(&["run", "--url", &url, "--key", "job", "--", "sh", "-c", "echo $DLOCK_FENCING_TOKEN"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let next: u64 = String::from_utf8_lossy(&o.stdout).trim().parse().expect("the next fence");
    assert!(next > fence, "fence {next} after the evicted {fence}");
}

#[test]
fn unlock_force_leaves_a_flock_holder_alone() {
    let dir = tempfile::tempdir().expect("tmp");
    let (locks, url) = locks(dir.path());
    // A fence drawn and released before, so that a stale one could be shown.
    assert_eq!(dlock(&["run", "--url", &url, "--key", "job", "--", "true"]).status.code(), Some(0));
    let mut f = flock(dir.path(), &[], &locks.join("job"), &holds_until_go("flocked"));
    written(dir.path(), "flocked");
    let o = dlock(&["unlock", "--url", &url, "--key", "job", "--force", "--yes"]);
    // Nothing names flock(1)'s hold (no fence), and nothing could tell it that it lost.
    assert_eq!(o.status.code(), Some(78), "{}", text(&o));
    assert!(text(&o).contains("no fence"), "{}", text(&o));
    let o = flock_now(&["-n", "-E", "99"], &locks.join("job"));
    assert_eq!(o.status.code(), Some(99), "flock(1)'s hold was taken away: {}", text(&o));
    std::fs::write(dir.path().join("go"), "").expect("go");
    assert_eq!(wait_exit(&mut f.0, Duration::from_secs(20)).code(), Some(0));
}
