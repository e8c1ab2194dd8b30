//! Holder processes: this test binary re-run as a child that takes a lock and answers on its
//! pipes, so that a holder can be paused (SIGSTOP) past its lease or SIGKILLed for real.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::Duration;

use lock_core::{FencingToken, Locker};
use lock_testkit::history::{Register, WriteOutcome};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::time::Instant;

const CHILD_ENV: &str = "DLOCK_HISTORY_CHILD";
pub const LEASE: Duration = Duration::from_millis(300);

/// The child's body (`history_child` runs it): returns at once unless `CHILD_ENV` is set.
/// The child takes the lock, prints `ACQUIRED <fence>`, prints `LOST` when its lost signal
/// fires, and answers each `WRITE` line on stdin with `WRITE lost=<bool>`: what a careful
/// holder checks right before writing to the protected resource.
pub async fn child() {
    let Ok(spec) = std::env::var(CHILD_ENV) else { return };
    let (url, key) = spec.split_once('|').expect("url|key");
    let backend = dlock::from_url(url).await.expect("child client");
    let locker = Locker::new(backend).with_watchdog_lease(LEASE).expect("lease");
    let g = locker.lock(key).wait(Duration::from_secs(10)).acquire().await.expect("child acquires");
    say(&format!("ACQUIRED {}", g.fence().map_or(0, |f| f.0)));
    let lost = g.lost_token();
    tokio::spawn(async move {
        lost.cancelled().await;
        say("LOST");
    });
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    while let Some(line) = rx.recv().await {
        if line == "WRITE" {
            say(&format!("WRITE lost={}", g.is_lost()));
        }
    }
    g.abandon();
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

pub struct Holder {
    child: Child,
    lines: std::sync::mpsc::Receiver<String>,
    /// Lines read but not yet asked for.
    backlog: Vec<String>,
}

impl Holder {
    pub fn spawn(url: &str, key: &str) -> Holder {
        let mut child = Command::new(std::env::current_exe().expect("test binary"))
            .args(["--exact", "history_child", "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, format!("{url}|{key}"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn holder process");
        let out: ChildStdout = child.stdout.take().expect("stdout");
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Holder { child, lines, backlog: Vec::new() }
    }

    /// The next line holding `prefix` (libtest may print its own "test ... " before the first),
    /// from `prefix` on, within `limit`.
    pub fn expect(&mut self, prefix: &str, limit: Duration) -> String {
        let deadline = std::time::Instant::now() + limit;
        loop {
            if let Some(i) = self.backlog.iter().position(|l| l.contains(prefix)) {
                let l = self.backlog.remove(i);
                return l[l.find(prefix).unwrap_or(0)..].to_owned();
            }
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => self.backlog.push(l),
                Err(_) => panic!("holder process: no {prefix:?} line within {limit:?}"),
            }
        }
    }

    pub fn pid(&self) -> Pid {
        Pid::from_raw(i32::try_from(self.child.id()).expect("pid"))
    }

    fn send(&mut self, line: &str) {
        let stdin = self.child.stdin.as_mut().expect("stdin");
        writeln!(stdin, "{line}").expect("write to holder");
        stdin.flush().expect("flush");
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A holder process is paused (SIGSTOP) past its lease; another client takes the lock and
/// writes; the holder is resumed and tries its late write. Either it was told first (`LOST`
/// before the write), or the fenced register refuses the write; its lost signal fires either
/// way. Then a holder process is SIGKILLed, and the time until another client holds is measured.
pub async fn holder_processes(label: &str, url: &str, recovery_limit: Duration) {
    let key = lock_testkit::conformance::key("process");
    let register = Register::default();
    let other =
        Locker::new(dlock::from_url(url).await.expect("client")).with_watchdog_lease(LEASE).expect("lease");

    let mut h = Holder::spawn(url, &key);
    let acquired = h.expect("ACQUIRED", Duration::from_secs(20));
    let fence: u64 = acquired["ACQUIRED ".len()..].parse().expect("fence");
    let child_read = register.peek(); // the child read before it was paused
    kill(h.pid(), Signal::SIGSTOP).expect("SIGSTOP holder");
    let paused = Instant::now();
    let g =
        other.lock(&key).wait(Duration::from_secs(20)).acquire().await.expect("taken from the paused holder");
    let taken_after = paused.elapsed();
    let v = register.read(1, g.fence()).expect("the new holder reads");
    assert_eq!(register.increment(1, g.fence(), v), WriteOutcome::Accepted);
    kill(h.pid(), Signal::SIGCONT).expect("SIGCONT holder");
    h.send("WRITE");
    let write = h.expect("WRITE", Duration::from_secs(5));
    let outcome = if write.ends_with("lost=true") {
        "told before its write"
    } else {
        let r = register.increment(0, Some(FencingToken(fence)).filter(|f| f.0 > 0), child_read);
        assert_eq!(r, WriteOutcome::Rejected, "{label}: the paused holder's late write got through");
        "late write refused by the fence"
    };
    h.expect("LOST", Duration::from_secs(5));
    g.release().await.expect("release");
    drop(h);

    let mut h = Holder::spawn(url, &key);
    h.expect("ACQUIRED", Duration::from_secs(20));
    kill(h.pid(), Signal::SIGKILL).expect("SIGKILL holder");
    let killed = Instant::now();
    let g =
        other.lock(&key).wait(Duration::from_secs(30)).acquire().await.expect("taken from the killed holder");
    let recovery = killed.elapsed();
    g.release().await.expect("release");
    eprintln!(
        "[{label} / holder processes] paused holder: lock taken after {taken_after:?}, {outcome}, lost signal fired; \
         SIGKILLed holder: lock taken after {recovery:?}"
    );
    assert!(recovery <= recovery_limit, "{label}: recovery {recovery:?} > {recovery_limit:?}");
}
