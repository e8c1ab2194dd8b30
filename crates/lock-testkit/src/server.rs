//! Real, throw-away Redis, MariaDB and ZooKeeper servers on loopback, with fault hooks.
//!
//! Every server is a direct child of the test process, started in its own process group on a
//! free `127.0.0.1` port, with its files in a private temporary directory (under `/dev/shm` when
//! it exists). Readiness always proves that the process answering on the port is *ours*:
//!
//! * Redis: `INFO server` reports `process_id:` equal to the child's pid;
//! * MariaDB: `select @@datadir` (through the `mariadb` CLI) prints our datadir;
//! * ZooKeeper: `srvr` reports `Mode: standalone|leader|follower` and `conf` shows our dataDir
//!   (`ruok` is *not* used: it answers before the server serves).
//!
//! The fault hooks (`kill`, `stop`, `restart`, `pause`, `resume`, `is_running`) live once in
//! [`ManagedProcess`]; every server type and every ensemble node forwards to it, and also
//! implements [`FaultControl`] for code that is generic over servers.
//!
//! # No orphans
//!
//! Next to every server runs a tiny watchdog (`/bin/sh`) whose stdin is a pipe held only by the
//! test process. When the test process ends in any way (panic, `exit`, SIGKILL, or simply never
//! dropping a server kept in a `static`), the kernel closes the pipe, the watchdog reads EOF,
//! SIGKILLs the server and removes its directory. Dropping a server kills it (SIGKILL + wait),
//! kills its watchdog and removes the directory.
//!
//! # Missing binaries
//!
//! The servers come from Debian packages (`redis-server`, `mariadb-server` + `mariadb-client`,
//! `zookeeper`). A missing binary or jar gives [`ServerError::MissingBinary`], which names the
//! package to install.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill as send_signal};
use nix::unistd::Pid;

mod mariadb;
mod redis;
mod zk;

pub use mariadb::{
    DATABASE as MARIADB_DATABASE, MariaDbServer, PASSWORD as MARIADB_PASSWORD, USER as MARIADB_USER,
    template_dir as mariadb_template_dir,
};
pub use redis::RedisServer;
pub use zk::{DEFAULT_TICK_MS as ZK_DEFAULT_TICK_MS, ZkEnsemble, ZkNode, ZkServer};

/// PEM files for a server that speaks TLS ([`RedisServer::start_tls`],
/// [`MariaDbServer::start_tls`]).
#[derive(Debug, Clone)]
pub struct TlsFiles {
    /// The server's certificate (chain), PEM.
    pub cert: PathBuf,
    /// The server's private key, PEM.
    pub key: PathBuf,
    /// The CA (PEM) the server trusts for client certificates; clients are not required to
    /// present one unless the extra arguments say so.
    pub ca: PathBuf,
}

/// Environment variable: URL of an externally managed Redis to test against instead of a private one.
pub const ENV_REDIS_URL: &str = "LOCK_TEST_REDIS_URL";
/// Environment variable: URL of an externally managed MySQL/MariaDB (`mysql://user:pw@host:port/db`).
pub const ENV_MYSQL_URL: &str = "LOCK_TEST_MYSQL_URL";
/// Environment variable: connect string of an externally managed ZooKeeper (`host:port[,host:port]`).
pub const ENV_ZK_URL: &str = "LOCK_TEST_ZK_URL";
/// Environment variable: when `1`, tests must fail (not skip) if a server cannot be provided.
pub const ENV_REQUIRE: &str = "LOCK_TEST_REQUIRE";

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

/// Why a test server could not be started, controlled or queried.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum ServerError {
    /// A server binary (or jar) is not installed.
    MissingBinary {
        /// The program or file that was looked for.
        binary: String,
        /// The Debian package that provides it (`apt-get install <debian_package>`).
        debian_package: &'static str,
    },
    /// An I/O operation failed (spawning a process, creating a directory, writing a config ...).
    Io {
        /// What was being done.
        context: String,
        /// The underlying error.
        source: Arc<io::Error>,
    },
    /// The server process exited while we were waiting for it to become ready.
    Exited {
        /// Which server.
        what: String,
        /// Its exit status.
        status: String,
        /// The last lines of its log.
        log_tail: String,
    },
    /// The server did not become ready in time.
    NotReady {
        /// Which server, and the last observation of the readiness probe.
        what: String,
        /// How long we waited.
        waited: Duration,
        /// The last lines of its log.
        log_tail: String,
    },
    /// A port was still accepting connections after the server owning it had been killed.
    PortStillOpen {
        /// The port.
        port: u16,
        /// How long we waited for it to close.
        waited: Duration,
    },
    /// The operation needs a running server, but it is not running.
    NotRunning {
        /// Which server.
        what: String,
    },
    /// A helper command (`mariadb-install-db`, `cp`, the `mariadb` CLI ...) failed.
    Command {
        /// What was run.
        what: String,
        /// Its exit status and output.
        detail: String,
    },
    /// A server answered something unexpected on its wire protocol.
    Protocol {
        /// Which server / request.
        what: String,
        /// What was wrong.
        detail: String,
    },
}

impl ServerError {
    /// True if the error means "not installed here" (so a test may be skipped unless
    /// [`require_servers`] is set).
    pub fn is_missing_binary(&self) -> bool {
        matches!(self, ServerError::MissingBinary { .. })
    }

    pub(crate) fn io(context: impl Into<String>, source: io::Error) -> Self {
        ServerError::Io { context: context.into(), source: Arc::new(source) }
    }
}

impl fmt::Display for ServerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServerError::MissingBinary { binary, debian_package } => write!(
                f,
                "`{binary}` not found; install the Debian package `{debian_package}` \
                 (apt-get install {debian_package})"
            ),
            ServerError::Io { context, source } => write!(f, "{context}: {source}"),
            ServerError::Exited { what, status, log_tail } => {
                write!(f, "{what} exited during startup ({status}); log tail:\n{log_tail}")
            }
            ServerError::NotReady { what, waited, log_tail } => {
                write!(f, "{what} not ready after {waited:?}; log tail:\n{log_tail}")
            }
            ServerError::PortStillOpen { port, waited } => {
                write!(f, "port {port} still accepts connections {waited:?} after its server died")
            }
            ServerError::NotRunning { what } => write!(f, "{what} is not running"),
            ServerError::Command { what, detail } => write!(f, "`{what}` failed: {detail}"),
            ServerError::Protocol { what, detail } => write!(f, "{what}: {detail}"),
        }
    }
}

impl std::error::Error for ServerError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ServerError::Io { source, .. } => Some(source.as_ref()),
            _ => None,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Environment helpers
// ---------------------------------------------------------------------------------------------

/// The externally managed server to use for `backend`, if its environment variable is set.
///
/// `backend` is `"redis"`, `"mysql"`/`"mariadb"` or `"zk"`/`"zookeeper"`; the variables are
/// [`ENV_REDIS_URL`], [`ENV_MYSQL_URL`] and [`ENV_ZK_URL`]. Empty values count as unset.
pub fn external_url(backend: &str) -> Option<String> {
    let var = match backend.to_ascii_lowercase().as_str() {
        "redis" => ENV_REDIS_URL,
        "mysql" | "mariadb" => ENV_MYSQL_URL,
        "zk" | "zookeeper" => ENV_ZK_URL,
        _ => return None,
    };
    std::env::var(var).ok().map(|v| v.trim().to_string()).filter(|v| !v.is_empty())
}

/// True if `LOCK_TEST_REQUIRE=1`: a test that cannot get its server must fail instead of skip.
pub fn require_servers() -> bool {
    std::env::var(ENV_REQUIRE).is_ok_and(|v| v.trim() == "1")
}

// ---------------------------------------------------------------------------------------------
// Shared (per test binary) servers
// ---------------------------------------------------------------------------------------------

static SHARED_REDIS: OnceLock<Result<RedisServer, ServerError>> = OnceLock::new();
static SHARED_MARIADB: OnceLock<Result<MariaDbServer, ServerError>> = OnceLock::new();
static SHARED_ZK: OnceLock<Result<ZkServer, ServerError>> = OnceLock::new();

/// The Redis server shared by every test of this process, started on first use.
///
/// Never inject faults into a shared server: other tests use it concurrently. It is killed by
/// its watchdog when the process ends.
pub fn try_shared_redis() -> Result<&'static RedisServer, ServerError> {
    SHARED_REDIS.get_or_init(RedisServer::start).as_ref().map_err(Clone::clone)
}

/// The MariaDB server shared by every test of this process, started on first use.
/// See [`try_shared_redis`] for the rules.
pub fn try_shared_mariadb() -> Result<&'static MariaDbServer, ServerError> {
    SHARED_MARIADB.get_or_init(MariaDbServer::start).as_ref().map_err(Clone::clone)
}

/// The standalone ZooKeeper shared by every test of this process, started on first use.
/// See [`try_shared_redis`] for the rules.
pub fn try_shared_zk() -> Result<&'static ZkServer, ServerError> {
    SHARED_ZK.get_or_init(ZkServer::start).as_ref().map_err(Clone::clone)
}

/// Like [`try_shared_redis`], but panics (with the reason) if the server cannot be started.
pub fn shared_redis() -> &'static RedisServer {
    try_shared_redis().unwrap_or_else(|e| panic!("shared redis-server: {e}"))
}

/// Like [`try_shared_mariadb`], but panics (with the reason) if the server cannot be started.
pub fn shared_mariadb() -> &'static MariaDbServer {
    try_shared_mariadb().unwrap_or_else(|e| panic!("shared mariadbd: {e}"))
}

/// Like [`try_shared_zk`], but panics (with the reason) if the server cannot be started.
pub fn shared_zk() -> &'static ZkServer {
    try_shared_zk().unwrap_or_else(|e| panic!("shared zookeeper: {e}"))
}

// ---------------------------------------------------------------------------------------------
// Ports, binaries, directories
// ---------------------------------------------------------------------------------------------

static HANDED_OUT_PORTS: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A free TCP port on 127.0.0.1, never handed out before by this process.
///
/// Ports are taken *below* the kernel's ephemeral range (`ip_local_port_range`, normally from
/// 32768), so an outgoing client connection can never pick a killed server's port as its source
/// port before the server is restarted on it; 26000-26999 is skipped (used by the fixed-port
/// service scripts). A port counts as free if `127.0.0.1:port` can be bound; it is released again,
/// so another process may still grab it before our server binds it: the `start` functions retry
/// with a new port when a server exits during startup. Falls back to binding `127.0.0.1:0`.
pub fn free_port() -> Result<u16, ServerError> {
    let mut taken = lock(&HANDED_OUT_PORTS);
    let (low, high) = (20_000u32, ephemeral_low().clamp(20_000, 65_535));
    if high > low + 2_000 {
        let span = high - low;
        // spread processes over the range: concurrent test binaries rarely probe the same ports
        let seed = std::process::id().wrapping_mul(2_654_435_761)
            ^ std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.subsec_nanos())
                .unwrap_or(0);
        for i in 0..span {
            let Ok(port) = u16::try_from(low + (seed.wrapping_add(i) % span)) else { continue };
            if (26_000..27_000).contains(&port) || taken.contains(&port) {
                continue;
            }
            if TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok() {
                taken.insert(port);
                return Ok(port);
            }
        }
    }
    for _ in 0..256 {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .map_err(|e| ServerError::io("binding 127.0.0.1:0 to find a free port", e))?;
        let port = listener
            .local_addr()
            .map_err(|e| ServerError::io("reading the local address of a probe socket", e))?
            .port();
        drop(listener);
        if taken.insert(port) {
            return Ok(port);
        }
    }
    Err(ServerError::io(
        "finding a free port",
        io::Error::new(io::ErrorKind::AddrInUse, "no unused port after 256 tries"),
    ))
}

/// The first port of the kernel's ephemeral (auto-bind) range; 32768 if unknown.
fn ephemeral_low() -> u32 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse().ok()))
        .unwrap_or(32_768)
}

pub(crate) fn loopback(port: u16) -> SocketAddr {
    SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, port))
}

/// Finds `name` in `PATH` (and the sbin directories, which a non-root `PATH` often lacks).
pub(crate) fn find_binary(name: &str, debian_package: &'static str) -> Result<PathBuf, ServerError> {
    let missing = || ServerError::MissingBinary { binary: name.to_string(), debian_package };
    if name.contains('/') {
        return if is_executable(Path::new(name)) { Ok(PathBuf::from(name)) } else { Err(missing()) };
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    let extra = ["/usr/local/sbin", "/usr/sbin", "/sbin", "/usr/local/bin", "/usr/bin", "/bin"];
    std::env::split_paths(&path)
        .chain(extra.iter().map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
        .ok_or_else(missing)
}

fn is_executable(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Checks that a data file (a jar) exists.
pub(crate) fn require_file(path: &str, debian_package: &'static str) -> Result<PathBuf, ServerError> {
    let p = PathBuf::from(path);
    if p.is_file() {
        Ok(p)
    } else {
        Err(ServerError::MissingBinary { binary: path.to_string(), debian_package })
    }
}

/// The base directory for server files: `/dev/shm` when it exists (tmpfs: fast, and short
/// paths for unix sockets), else the system temp dir.
pub(crate) fn temp_base() -> PathBuf {
    let shm = Path::new("/dev/shm");
    let writable = shm.is_dir()
        && std::fs::metadata(shm)
            .is_ok_and(|m| !m.permissions().readonly() && m.permissions().mode() & 0o002 != 0);
    if writable { shm.to_path_buf() } else { std::env::temp_dir() }
}

/// A fresh private directory `BASE/lktk-<kind>-XXXXXX`, canonicalised.
pub(crate) fn make_temp_dir(kind: &str) -> Result<tempfile::TempDir, ServerError> {
    tempfile::Builder::new()
        .prefix(&format!("lktk-{kind}-"))
        .tempdir_in(temp_base())
        .map_err(|e| ServerError::io(format!("creating a temp dir for {kind}"), e))
}

pub(crate) fn canonical(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}

/// The last `max_bytes` of a file, lossily decoded (empty string if unreadable).
pub(crate) fn file_tail(path: &Path, max_bytes: u64) -> String {
    let Ok(mut f) = File::open(path) else { return String::new() };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = f.seek(SeekFrom::Start(len.saturating_sub(max_bytes)));
    let mut buf = Vec::new();
    let _ = f.read_to_end(&mut buf);
    String::from_utf8_lossy(&buf).into_owned()
}

/// Runs a helper command to completion; non-zero exit becomes [`ServerError::Command`].
pub(crate) fn run_command(what: &str, cmd: &mut Command) -> Result<String, ServerError> {
    let out = cmd.stdin(Stdio::null()).output().map_err(|e| ServerError::io(format!("running {what}"), e))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(ServerError::Command {
            what: what.to_string(),
            detail: format!(
                "{}; stdout: {}; stderr: {}",
                out.status,
                String::from_utf8_lossy(&out.stdout).trim(),
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        })
    }
}

/// True if a TCP connection to `127.0.0.1:port` is accepted right now.
pub(crate) fn port_accepts(port: u16) -> bool {
    TcpStream::connect_timeout(&loopback(port), Duration::from_millis(250)).is_ok()
}

/// A program that removes `dir` when this process ends (the pipe on its stdin closes).
/// The returned child must be kept alive (never dropped) for as long as `dir` should live.
pub(crate) fn spawn_exit_reaper(dir: &Path) -> Result<Child, ServerError> {
    Command::new("/bin/sh")
        .arg("-c")
        .arg(r#"read _eof; rm -rf "$1""#)
        .arg("lktk-reaper")
        .arg(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .map_err(|e| ServerError::io("spawning the temp-dir reaper (/bin/sh)", e))
}

/// Waits for the server with `pid` to die (or become a zombie) after the SIGKILL, at most 5 s,
/// then removes the directory.
const WATCHDOG_SCRIPT: &str = r#"read _eof
kill -9 "$1" 2>/dev/null
i=0
while [ "$i" -lt 100 ] && [ -d "/proc/$1" ] && ! grep -qs '^State:[[:space:]]*Z' "/proc/$1/status"; do
  sleep 0.05; i=$((i+1))
done
rm -rf "$2""#;

fn spawn_watchdog(server_pid: u32, dir: &Path) -> Result<Child, ServerError> {
    Command::new("/bin/sh")
        .arg("-c")
        .arg(WATCHDOG_SCRIPT)
        .arg("lktk-watchdog")
        .arg(server_pid.to_string())
        .arg(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        // own group: a Ctrl-C to the test's process group must not kill the watchdog first
        .process_group(0)
        .spawn()
        .map_err(|e| ServerError::io("spawning the watchdog (/bin/sh)", e))
}

fn kill_and_reap(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

// ---------------------------------------------------------------------------------------------
// Readiness probes
// ---------------------------------------------------------------------------------------------

/// How to prove that the server on the port is ours and serving.
#[derive(Debug)]
pub(crate) enum Probe {
    /// `INFO server` → `process_id:<pid>` (over `unix` when set: a TLS-only server's socket).
    Redis { password: Option<String>, unix: Option<PathBuf> },
    /// `mariadb -e 'select @@datadir'` prints `datadir` (which ends in `/`); over `socket` when
    /// set (a server that refuses plaintext TCP).
    MariaDb { client: PathBuf, datadir: String, socket: Option<PathBuf> },
    /// `srvr` → `Mode: standalone|leader|follower|observer`, and `conf` mentions `data_dir`.
    Zk { data_dir: String },
}

impl Probe {
    fn poll_interval(&self) -> Duration {
        match self {
            Probe::Redis { .. } => Duration::from_millis(5),
            Probe::MariaDb { .. } => Duration::from_millis(10),
            Probe::Zk { .. } => Duration::from_millis(20),
        }
    }

    /// `Ok(())` when ready; `Err(observation)` otherwise.
    fn check(&self, pid: u32, port: u16) -> Result<(), String> {
        match self {
            Probe::Redis { password, unix } => {
                let info = redis::info_server(port, unix.as_deref(), password.as_deref())
                    .map_err(|e| e.to_string())?;
                let reported = info
                    .lines()
                    .find_map(|l| l.trim().strip_prefix("process_id:"))
                    .map(|s| s.trim().to_string())
                    .unwrap_or_default();
                if reported == pid.to_string() {
                    Ok(())
                } else {
                    Err(format!("INFO server reports process_id:{reported}, expected {pid}"))
                }
            }
            Probe::MariaDb { client, datadir, socket } => {
                if !port_accepts(port) {
                    return Err("port not accepting connections".into());
                }
                let got = mariadb::query_as_root(client, port, socket.as_deref(), "select @@datadir")
                    .map_err(|e| e.to_string())?;
                if got.trim() == datadir {
                    Ok(())
                } else {
                    Err(format!("select @@datadir returned {:?}, expected {datadir:?}", got.trim()))
                }
            }
            Probe::Zk { data_dir } => {
                let srvr = zk::four_letter_word(port, "srvr").map_err(|e| e.to_string())?;
                let mode = zk::parse_mode(&srvr).ok_or_else(|| format!("srvr: {}", srvr.trim()))?;
                if !matches!(mode.as_str(), "standalone" | "leader" | "follower" | "observer") {
                    return Err(format!("srvr Mode: {mode}"));
                }
                let conf = zk::four_letter_word(port, "conf").map_err(|e| e.to_string())?;
                // a custom whitelist without `conf` only loses the ownership check
                if conf.contains(data_dir.as_str()) || conf.contains("not in the whitelist") {
                    Ok(())
                } else {
                    Err(format!("conf does not mention our dataDir {data_dir}"))
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// ManagedProcess: the one implementation of the fault hooks
// ---------------------------------------------------------------------------------------------

/// What is needed to (re)spawn a server process.
#[derive(Debug)]
pub(crate) struct Spec {
    /// Human-readable name used in errors ("redis-server on 127.0.0.1:PORT").
    pub what: String,
    pub program: PathBuf,
    pub args: Vec<OsString>,
    /// The client port (readiness and kill checks).
    pub port: u16,
    /// Other ports the process listens on (checked closed after a kill).
    pub other_ports: Vec<u16>,
    pub probe: Probe,
    pub ready_timeout: Duration,
}

#[derive(Debug, Default)]
struct ProcState {
    child: Option<Child>,
    watchdog: Option<Child>,
    last_pid: u32,
    paused: bool,
    last_ready_after: Option<Duration>,
}

/// One server process owned by the test: spawns it (and its watchdog), proves readiness, and
/// implements the fault hooks. Every server type and ensemble node wraps one.
///
/// All methods take `&self` (the state sits behind a mutex), so servers kept in a `static` or
/// borrowed from an ensemble can be faulted too.
#[derive(Debug)]
pub struct ManagedProcess {
    spec: Spec,
    log_path: PathBuf,
    state: Mutex<ProcState>,
    // Dropped after `Drop::drop` killed the process.
    dir: tempfile::TempDir,
}

impl ManagedProcess {
    /// Spawns the process (not yet waiting for readiness).
    pub(crate) fn spawn_new(spec: Spec, dir: tempfile::TempDir) -> Result<Self, ServerError> {
        let log_path = dir.path().join("server.log");
        let me = ManagedProcess { spec, log_path, state: Mutex::new(ProcState::default()), dir };
        me.spawn()?;
        Ok(me)
    }

    /// Spawns and waits until ready; kills the process if it does not get ready.
    pub(crate) fn start(spec: Spec, dir: tempfile::TempDir) -> Result<Self, ServerError> {
        let me = Self::spawn_new(spec, dir)?;
        me.wait_ready()?;
        Ok(me)
    }

    fn spawn(&self) -> Result<(), ServerError> {
        let mut st = lock(&self.state);
        if let Some(child) = st.child.as_mut()
            && child.try_wait().ok().flatten().is_none()
        {
            return Ok(()); // already running
        }
        Self::reap(&mut st);
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log_path)
            .map_err(|e| ServerError::io(format!("opening {}", self.log_path.display()), e))?;
        let log2 = log.try_clone().map_err(|e| ServerError::io("duplicating the log file handle", e))?;
        let mut child = Command::new(&self.spec.program)
            .args(&self.spec.args)
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            .process_group(0)
            .spawn()
            .map_err(|e| ServerError::io(format!("spawning {}", self.spec.program.display()), e))?;
        let watchdog = match spawn_watchdog(child.id(), self.dir.path()) {
            Ok(w) => w,
            Err(e) => {
                kill_and_reap(&mut child);
                return Err(e);
            }
        };
        st.last_pid = child.id();
        st.child = Some(child);
        st.watchdog = Some(watchdog);
        st.paused = false;
        Ok(())
    }

    /// Reaps a dead child and its watchdog (the state holds no live process afterwards).
    fn reap(st: &mut ProcState) {
        if let Some(mut child) = st.child.take() {
            kill_and_reap(&mut child);
        }
        if let Some(mut w) = st.watchdog.take() {
            kill_and_reap(&mut w);
        }
        st.paused = false;
    }

    /// Exit status if the child has exited (and then also retires its watchdog).
    fn exited(&self) -> Option<ExitStatus> {
        let mut st = lock(&self.state);
        let status = st.child.as_mut().and_then(|c| c.try_wait().ok().flatten());
        if status.is_some() {
            // The pid is free now: retire the watchdog before it could ever target a reused pid.
            if let Some(mut w) = st.watchdog.take() {
                kill_and_reap(&mut w);
            }
        }
        status
    }

    /// Polls the readiness probe until it passes, the process exits, or the timeout elapses.
    /// On failure the process is killed.
    pub(crate) fn wait_ready(&self) -> Result<(), ServerError> {
        let started = Instant::now();
        let deadline = started + self.spec.ready_timeout;
        let pid = self.pid();
        loop {
            if let Some(status) = self.exited() {
                self.kill_quietly();
                return Err(ServerError::Exited {
                    what: self.spec.what.clone(),
                    status: status.to_string(),
                    log_tail: self.log_tail(),
                });
            }
            let last = match self.spec.probe.check(pid, self.spec.port) {
                Ok(()) => {
                    lock(&self.state).last_ready_after = Some(started.elapsed());
                    return Ok(());
                }
                Err(observation) => observation,
            };
            if Instant::now() >= deadline {
                let log_tail = self.log_tail();
                self.kill_quietly();
                return Err(ServerError::NotReady {
                    what: format!("{} (last probe: {last})", self.spec.what),
                    waited: started.elapsed(),
                    log_tail,
                });
            }
            thread::sleep(self.spec.probe.poll_interval());
        }
    }

    fn kill_quietly(&self) {
        let mut st = lock(&self.state);
        Self::reap(&mut st);
    }

    /// Polls until every port of the process refuses connections (at most 10 s).
    fn wait_ports_closed(&self) -> Result<(), ServerError> {
        let started = Instant::now();
        for &port in std::iter::once(&self.spec.port).chain(&self.spec.other_ports) {
            while port_accepts(port) {
                if started.elapsed() > Duration::from_secs(10) {
                    return Err(ServerError::PortStillOpen { port, waited: started.elapsed() });
                }
                thread::sleep(Duration::from_millis(5));
            }
        }
        Ok(())
    }

    fn signal(&self, sig: Signal) -> Result<(), ServerError> {
        let mut st = lock(&self.state);
        // never signal a pid we already reaped (it could have been reused)
        let pid = match st.child.as_mut() {
            Some(c) => match c.try_wait() {
                Ok(None) => c.id(),
                _ => return Err(ServerError::NotRunning { what: self.spec.what.clone() }),
            },
            None => return Err(ServerError::NotRunning { what: self.spec.what.clone() }),
        };
        let raw = i32::try_from(pid).map_err(|_| ServerError::NotRunning { what: self.spec.what.clone() })?;
        send_signal(Pid::from_raw(raw), sig)
            .map_err(|e| ServerError::io(format!("sending {sig} to {}", self.spec.what), io::Error::from(e)))
    }

    // ----- public fault hooks -----

    /// SIGKILL, reap the process, retire its watchdog and wait until its ports are closed.
    /// A no-op (except the port check) if it is not running.
    pub fn kill(&self) -> Result<(), ServerError> {
        {
            let mut st = lock(&self.state);
            if let Some(mut child) = st.child.take() {
                let _ = child.kill(); // SIGKILL; also works on a SIGSTOPped process
                // Retire the watchdog *before* reaping, while the pid cannot be reused.
                if let Some(mut w) = st.watchdog.take() {
                    kill_and_reap(&mut w);
                }
                let _ = child.wait();
            }
            Self::reap(&mut st);
        }
        self.wait_ports_closed()
    }

    /// SIGTERM (a clean shutdown) and wait for the exit; SIGKILL after 10 s.
    pub fn stop(&self) -> Result<(), ServerError> {
        if self.is_running() {
            self.signal(Signal::SIGTERM)?;
            if self.is_paused() {
                // a stopped process only acts on SIGTERM once continued
                let _ = self.signal(Signal::SIGCONT);
            }
            let deadline = Instant::now() + Duration::from_secs(10);
            while self.exited().is_none() && Instant::now() < deadline {
                thread::sleep(Duration::from_millis(5));
            }
        }
        self.kill()
    }

    /// Starts the process again with the same command line, port and directory (so the data
    /// survives), and waits until it truly serves. If it is still running it is killed first.
    pub fn restart(&self) -> Result<(), ServerError> {
        self.kill()?;
        self.spawn()?;
        self.wait_ready()
    }

    /// Starts the process again (like [`restart`](Self::restart)) without waiting for readiness.
    pub(crate) fn respawn(&self) -> Result<(), ServerError> {
        self.kill()?;
        self.spawn()
    }

    /// SIGSTOP: the process freezes; connections stay open but nothing is answered.
    pub fn pause(&self) -> Result<(), ServerError> {
        self.signal(Signal::SIGSTOP)?;
        lock(&self.state).paused = true;
        Ok(())
    }

    /// SIGCONT after [`pause`](Self::pause).
    pub fn resume(&self) -> Result<(), ServerError> {
        self.signal(Signal::SIGCONT)?;
        lock(&self.state).paused = false;
        Ok(())
    }

    /// True while the process exists (also while paused).
    pub fn is_running(&self) -> bool {
        let running = {
            let mut st = lock(&self.state);
            st.child.as_mut().is_some_and(|c| c.try_wait().ok().flatten().is_none())
        };
        if !running {
            // retire the watchdog of a process that died by itself
            let _ = self.exited();
        }
        running
    }

    /// True between [`pause`](Self::pause) and [`resume`](Self::resume) (or a kill/restart).
    pub fn is_paused(&self) -> bool {
        lock(&self.state).paused
    }

    /// The pid of the current process (after a kill: of the last one).
    pub fn pid(&self) -> u32 {
        lock(&self.state).last_pid
    }

    /// The client port.
    pub fn port(&self) -> u16 {
        self.spec.port
    }

    /// The private directory holding the server's data, config and log.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The server's log file (its stdout and stderr).
    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// The last 4 KiB of the log.
    pub fn log_tail(&self) -> String {
        file_tail(&self.log_path, 4096)
    }

    /// How long the last (re)start took from spawn to passing the readiness probe.
    pub fn last_ready_after(&self) -> Option<Duration> {
        lock(&self.state).last_ready_after
    }
}

impl Drop for ManagedProcess {
    fn drop(&mut self) {
        let mut st = lock(&self.state);
        if let Some(mut child) = st.child.take() {
            let _ = child.kill();
            if let Some(mut w) = st.watchdog.take() {
                kill_and_reap(&mut w);
            }
            let _ = child.wait();
        }
        Self::reap(&mut st);
        // `dir` (TempDir) is removed when the fields drop, after this.
    }
}

/// The fault hooks, for code that is generic over servers (`&dyn FaultControl`).
///
/// Every server type also has the same methods as inherent methods, so calling them needs no
/// import of this trait.
pub trait FaultControl {
    /// The process behind this server.
    fn process(&self) -> &ManagedProcess;

    /// See [`ManagedProcess::kill`].
    fn kill(&self) -> Result<(), ServerError> {
        self.process().kill()
    }
    /// See [`ManagedProcess::stop`].
    fn stop(&self) -> Result<(), ServerError> {
        self.process().stop()
    }
    /// See [`ManagedProcess::restart`].
    fn restart(&self) -> Result<(), ServerError> {
        self.process().restart()
    }
    /// See [`ManagedProcess::pause`].
    fn pause(&self) -> Result<(), ServerError> {
        self.process().pause()
    }
    /// See [`ManagedProcess::resume`].
    fn resume(&self) -> Result<(), ServerError> {
        self.process().resume()
    }
    /// See [`ManagedProcess::is_running`].
    fn is_running(&self) -> bool {
        self.process().is_running()
    }
}

/// Inherent forwarding of the fault hooks (so callers need no trait import) + `FaultControl`.
macro_rules! fault_hooks {
    ($ty:ty, $field:ident) => {
        impl $ty {
            /// SIGKILL the server, reap it and wait until its port is closed.
            pub fn kill(&self) -> Result<(), $crate::server::ServerError> {
                self.$field.kill()
            }
            /// SIGTERM (clean shutdown) and wait for the exit.
            pub fn stop(&self) -> Result<(), $crate::server::ServerError> {
                self.$field.stop()
            }
            /// Start again on the same port with the same data directory; waits until serving.
            pub fn restart(&self) -> Result<(), $crate::server::ServerError> {
                self.$field.restart()
            }
            /// SIGSTOP: freeze the server (requests hang, connections stay open).
            pub fn pause(&self) -> Result<(), $crate::server::ServerError> {
                self.$field.pause()
            }
            /// SIGCONT after [`pause`](Self::pause).
            pub fn resume(&self) -> Result<(), $crate::server::ServerError> {
                self.$field.resume()
            }
            /// True while the server process exists (also while paused).
            pub fn is_running(&self) -> bool {
                self.$field.is_running()
            }
            /// The pid of the server process (after a kill: of the last one).
            pub fn pid(&self) -> u32 {
                self.$field.pid()
            }
            /// The underlying process (directory, log, startup time ...).
            pub fn process(&self) -> &$crate::server::ManagedProcess {
                &self.$field
            }
        }

        impl $crate::server::FaultControl for $ty {
            fn process(&self) -> &$crate::server::ManagedProcess {
                &self.$field
            }
        }
    };
}
pub(crate) use fault_hooks;

/// Runs `attempt` up to 3 times while the server exits during startup (typically: the port we
/// picked was grabbed by someone else in between). Other errors are returned at once.
pub(crate) fn with_port_retries<T>(
    mut attempt: impl FnMut() -> Result<T, ServerError>,
) -> Result<T, ServerError> {
    let mut tries = 0;
    loop {
        tries += 1;
        match attempt() {
            Err(ServerError::Exited { .. }) if tries < 3 => continue,
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_binary_names_the_package() {
        let err =
            find_binary("lktk-definitely-not-installed", "some-debian-pkg").expect_err("must be missing");
        assert!(err.is_missing_binary());
        let msg = err.to_string();
        assert!(msg.contains("lktk-definitely-not-installed"), "{msg}");
        assert!(msg.contains("apt-get install some-debian-pkg"), "{msg}");
    }

    #[test]
    fn free_ports_are_unique() {
        let ports: Vec<u16> = (0..50).map(|_| free_port().expect("free port")).collect();
        let set: BTreeSet<u16> = ports.iter().copied().collect();
        assert_eq!(set.len(), ports.len());
    }

    #[test]
    fn external_url_maps_backends() {
        assert_eq!(external_url("nosuch"), None);
    }
}
