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

// ---------------------------------------------------------------------------------------------
// Apache Curator (Java)
// ---------------------------------------------------------------------------------------------

/// Debian's `libcurator-recipes-java` and what Curator needs at run time; a missing jar skips.
const CURATOR_JARS: &[&str] = &[
    "/usr/share/java/curator-recipes.jar",
    "/usr/share/java/curator-framework.jar",
    "/usr/share/java/curator-client.jar",
    "/usr/share/java/zookeeper.jar",
    "/usr/share/java/zookeeper-jute.jar",
    "/usr/share/java/guava.jar",
    "/usr/share/java/slf4j-api.jar",
    "/usr/share/java/slf4j-nop.jar",
];
/// The peer's source, compiled into the target dir under a name derived from its content, so
/// an edited peer is compiled again and test binaries running at once share one build.
const CURATOR_PEER_SOURCE: &str = include_str!("../java/CuratorPeer.java");

/// The classpath of the compiled Curator peer: compiled with `javac` once per test binary.
fn curator_classpath() -> Result<String, String> {
    static CLASSPATH: OnceLock<Result<String, String>> = OnceLock::new();
    CLASSPATH
        .get_or_init(|| {
            for tool in ["java", "javac"] {
                if !crate::server::is_installed(tool) {
                    return Err(format!("{tool} not found (install default-jdk-headless)"));
                }
            }
            if let Some(jar) = CURATOR_JARS.iter().find(|j| !Path::new(j).is_file()) {
                return Err(format!("{jar} not found (install libcurator-recipes-java)"));
            }
            let jars = CURATOR_JARS.join(":");
            let classes = compile_curator_peer(&jars)?;
            Ok(format!("{}:{jars}", classes.display()))
        })
        .clone()
}

fn compile_curator_peer(jars: &str) -> Result<PathBuf, String> {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    CURATOR_PEER_SOURCE.hash(&mut h);
    let base = std::env::var("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| workspace_root().join("target"))
        .join("interop-java");
    let done = base.join(format!("curator-{:016x}", h.finish()));
    if done.join("CuratorPeer.class").is_file() {
        return Ok(done);
    }
    // Built in a private dir and renamed into place: another test binary may compile at once.
    let work = base.join(format!("tmp-{}-{}", std::process::id(), uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&work).map_err(|e| format!("create {}: {e}", work.display()))?;
    let source = work.join("CuratorPeer.java");
    std::fs::write(&source, CURATOR_PEER_SOURCE).map_err(|e| format!("write {}: {e}", source.display()))?;
    let out = std::process::Command::new("javac")
        .args(["-nowarn", "-d"])
        .arg(&work)
        .arg("-cp")
        .arg(jars)
        .arg(&source)
        .output()
        .map_err(|e| format!("javac: {e}"))?;
    if !out.status.success() {
        let _ = std::fs::remove_dir_all(&work);
        return Err(format!("javac CuratorPeer.java failed: {}", String::from_utf8_lossy(&out.stderr)));
    }
    if std::fs::rename(&work, &done).is_err() {
        // Someone else's build got there first (a rename onto a full dir fails): use theirs.
        let _ = std::fs::remove_dir_all(&work);
        if !done.join("CuratorPeer.class").is_file() {
            return Err(format!("could not move the compiled peer to {}", done.display()));
        }
    }
    Ok(done)
}

/// A Java process holding one Curator client (session timeout `session`, connected to
/// `connect`) and driving Apache Curator's `InterProcessMutex` (Debian's
/// `libcurator-recipes-java`), returned once it printed `READY <negotiated session ms>`.
///
/// Protocol: `acquire <path> <timeout-ms>` -> `ACQUIRED <node path> <czxid> <t>` | `TIMEOUT` |
/// `ERROR ..`; `release` -> `RELEASED <t>` | `ERROR ..`; `bench <path> <n> <timeout-ms>` ->
/// `SAMPLES <µs> ..` (n acquire+release timed in the JVM); `exit`. `<t>` is `System.nanoTime()`
/// (`CLOCK_MONOTONIC`, the clock of `Instant`) when acquire returned / before release was
/// called, so a hand-over can be timed across processes. [`Peer::kill`] is a crashed Curator
/// process (its session expires, its node goes with it).
///
/// `None` after printing `SKIPPED` when the JDK or the jars are missing and `LOCK_TEST_REQUIRE`
/// is off; with it on, that panics.
///
/// # Panics
/// If the JVM does not start or connect within 30 s.
pub async fn curator_peer(connect: &str, session: Duration) -> Option<Peer> {
    let classpath = match curator_classpath() {
        Ok(cp) => cp,
        Err(why) if !require_servers() => {
            eprintln!("SKIPPED curator interop: {why}");
            return None;
        }
        Err(why) => panic!("curator interop peer: {why}"),
    };
    let mut command = Command::new("java");
    // A small, quick JVM: the peer holds one client.
    command.args(["-Xss512k", "-Xmx64m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-cp"]);
    command.arg(classpath).arg("CuratorPeer").arg(connect).arg(session.as_millis().to_string());
    let mut peer = Peer::spawn("curator", command);
    peer.expect("READY", Duration::from_secs(30)).await;
    Some(peer)
}
