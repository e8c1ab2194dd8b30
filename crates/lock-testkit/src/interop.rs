//! The other side of the interop tests: real lock libraries of other languages, driven as child
//! processes over a line protocol.
//!
//! A [`Peer`] is a program (a Python script on the venv of [`python`], a Java class) that reads
//! one command per line on stdin and answers one line per event on stdout. Tests send commands
//! and wait for answers with a deadline, so "the other side holds the lock" is an answer the
//! peer printed after its library returned, never a sleep.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::OnceLock;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use crate::server::require_servers;

/// The workspace root (where `scripts/` lives).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("workspace root")
}

/// The python of a private virtualenv holding the pinned Python lock libraries (redis-py,
/// python-redis-lock, PyMySQL, kazoo), made by `scripts/interop-venv.sh` on first use.
///
/// `None` after printing `SKIPPED` when the venv cannot be made and `LOCK_TEST_REQUIRE` is off;
/// with it on, a failure panics.
pub fn python() -> Option<PathBuf> {
    static PYTHON: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let made = PYTHON.get_or_init(|| {
        let root = workspace_root();
        let dir = std::env::var("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|_| root.join("target"))
            .join("interop-venv");
        let out = std::process::Command::new("bash")
            .arg(root.join("scripts/interop-venv.sh"))
            .arg(&dir)
            .stderr(Stdio::inherit())
            .output()
            .map_err(|e| format!("bash scripts/interop-venv.sh: {e}"))?;
        if !out.status.success() {
            return Err(format!("scripts/interop-venv.sh failed ({})", out.status));
        }
        Ok(dir.join("bin/python"))
    });
    match made {
        Ok(python) => Some(python.clone()),
        Err(why) if !require_servers() => {
            eprintln!("SKIPPED python interop: {why}");
            None
        }
        Err(why) => panic!("python interop venv: {why}"),
    }
}

/// A child process speaking the line protocol; killed when dropped.
#[derive(Debug)]
pub struct Peer {
    name: String,
    child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Peer {
    /// Starts `command` with piped stdin/stdout (stderr goes to the test's output).
    ///
    /// # Panics
    /// If the program cannot be started.
    pub fn spawn(name: &str, mut command: Command) -> Peer {
        command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::inherit()).kill_on_drop(true);
        let mut child = command.spawn().unwrap_or_else(|e| panic!("start peer {name}: {e}"));
        let stdin = child.stdin.take().expect("piped stdin");
        let lines = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
        Peer { name: name.to_owned(), child, stdin, lines }
    }

    /// Sends one command line.
    ///
    /// # Panics
    /// If the peer has gone away.
    pub async fn send(&mut self, line: &str) {
        let sent = async {
            self.stdin.write_all(line.as_bytes()).await?;
            self.stdin.write_all(b"\n").await?;
            self.stdin.flush().await
        };
        sent.await.unwrap_or_else(|e| panic!("peer {}: send {line:?}: {e}", self.name));
    }

    /// The next line the peer prints, within `timeout`.
    ///
    /// # Panics
    /// On timeout, or if the peer exits first.
    pub async fn recv(&mut self, timeout: Duration) -> String {
        match tokio::time::timeout(timeout, self.lines.next_line()).await {
            Ok(Ok(Some(line))) => line,
            Ok(Ok(None)) => panic!("peer {} exited: {:?}", self.name, self.child.try_wait()),
            Ok(Err(e)) => panic!("peer {}: read: {e}", self.name),
            Err(_) => panic!("peer {}: no answer within {timeout:?}", self.name),
        }
    }

    /// Reads lines until one starts with `prefix` and returns it; earlier lines are printed.
    ///
    /// # Panics
    /// As [`Peer::recv`], with `timeout` counted for the whole wait.
    pub async fn expect(&mut self, prefix: &str, timeout: Duration) -> String {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let line = self.recv(left).await;
            if line.starts_with(prefix) {
                return line;
            }
            eprintln!("peer {}: {line}", self.name);
        }
    }

    /// Sends `line` and waits for an answer starting with `prefix`.
    pub async fn call(&mut self, line: &str, prefix: &str, timeout: Duration) -> String {
        self.send(line).await;
        self.expect(prefix, timeout).await
    }

    /// The peer's pid (for SIGKILL / SIGSTOP as a fault).
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Kills the peer (SIGKILL) and waits for it: a crashed client of the other library.
    pub async fn kill(&mut self) {
        let _ = self.child.kill().await;
    }
}
