//! A private `nats-server` (Debian's `nats-server`, 2.9) with JetStream, on loopback.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use lock_testkit::server::{
    FaultControl, ManagedProcess, Probe, ServerError, Spec, TlsFiles, free_port, make_temp_dir,
};

/// Environment variable: `host:port` of an externally managed nats-server with JetStream to
/// test against instead of a private one (faults then need a private server).
pub const ENV_URL: &str = "LOCK_TEST_NATS_URL";

/// A private nats-server with JetStream on `127.0.0.1:port()`, its store on tmpfs, its
/// monitoring on a second port (the readiness probe's). The store survives
/// [`kill`](FaultControl::kill) + [`restart`](FaultControl::restart). Dropping it kills the
/// process and removes its directory.
#[derive(Debug)]
pub struct NatsServer {
    proc: ManagedProcess,
}

impl FaultControl for NatsServer {
    fn process(&self) -> &ManagedProcess {
        &self.proc
    }
}

fn binary() -> Result<PathBuf, ServerError> {
    let missing =
        || ServerError::MissingBinary { binary: "nats-server".into(), debian_package: "nats-server" };
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/usr/local/sbin", "/usr/local/bin", "/usr/bin"].iter().map(PathBuf::from))
        .map(|d| d.join("nats-server"))
        .find(|p| p.is_file())
        .ok_or_else(missing)
}

impl NatsServer {
    /// Starts a server (retrying on another port if the one picked was taken meanwhile).
    ///
    /// # Errors
    /// [`ServerError::MissingBinary`] without the `nats-server` package; the start's errors.
    pub fn start() -> Result<NatsServer, ServerError> {
        Self::start_with(&[])
    }

    /// Starts a server with extra `nats-server` flags (after ours: `--user u --pass p`).
    ///
    /// # Errors
    /// As [`start`](Self::start).
    pub fn start_with(extra: &[&str]) -> Result<NatsServer, ServerError> {
        let program = binary()?;
        let mut tries = 0;
        loop {
            tries += 1;
            match Self::start_once(&program, extra) {
                Err(ServerError::Exited { .. }) if tries < 3 => continue,
                other => return other,
            }
        }
    }

    /// Starts a server that serves clients over TLS only, with `tls`'s certificate and key
    /// (`nats+tls://` URLs trusting `tls.ca`); its monitoring port stays plain HTTP.
    ///
    /// # Errors
    /// As [`start`](Self::start).
    pub fn start_tls(tls: &TlsFiles) -> Result<NatsServer, ServerError> {
        let (cert, key) = (tls.cert.to_string_lossy(), tls.key.to_string_lossy());
        Self::start_with(&["--tls", "--tlscert", &cert, "--tlskey", &key])
    }

    fn start_once(program: &Path, extra: &[&str]) -> Result<NatsServer, ServerError> {
        // Under /dev/shm for the tests (a JetStream store's fsyncs cost nothing there), on disk
        // for servers run as packaged.
        let dir = make_temp_dir("nats")?;
        let (port, monitor) = (free_port()?, free_port()?);
        // The directory's own name: unique among every server of every test process, so the
        // probe can tell ours from a stranger on a reused port.
        let name: String = dir
            .path()
            .file_name()
            .map(|n| n.to_string_lossy().chars().filter(char::is_ascii_alphanumeric).collect())
            .unwrap_or_default();
        let store = dir.path().join("js");
        let args: Vec<OsString> = [
            "-a",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-m",
            &monitor.to_string(),
            "-js",
            "-sd",
            &store.to_string_lossy(),
            "--server_name",
            &name,
        ]
        .iter()
        .chain(extra)
        .map(OsString::from)
        .collect();
        let what = format!("nats-server on 127.0.0.1:{port}");
        let probe = Probe::new(Duration::from_millis(20), move |_pid, _port| ready(monitor, &name));
        let spec =
            Spec::new(what, program.to_owned(), args, (port, vec![monitor]), probe, Duration::from_secs(20));
        Ok(NatsServer { proc: ManagedProcess::start(spec, dir)? })
    }

    /// The client port.
    pub fn port(&self) -> u16 {
        self.proc.port()
    }

    /// `127.0.0.1:port`.
    pub fn endpoint(&self) -> String {
        format!("127.0.0.1:{}", self.port())
    }

    /// A client URL of `bucket` with `lease_ttl`.
    pub fn url(&self, bucket: &str, lease_ttl: Duration) -> String {
        format!("nats://{}/{bucket}?lease_ttl={}ms", self.endpoint(), lease_ttl.as_millis())
    }
}

/// Ready when the monitoring port's `/varz` names our server (the process answering is ours,
/// not a stranger on a reused port) and `/healthz` says JetStream serves.
fn ready(monitor: u16, name: &str) -> Result<(), String> {
    let varz = http_get(monitor, "/varz")?;
    if !varz.contains(&format!("\"server_name\": \"{name}\""))
        && !varz.contains(&format!("\"server_name\":\"{name}\""))
    {
        return Err(format!("/varz on {monitor} does not name our server {name}"));
    }
    let health = http_get(monitor, "/healthz")?;
    if health.contains("\"ok\"") { Ok(()) } else { Err(format!("/healthz: {}", health.trim())) }
}

/// The body of `GET path` on the loopback `port` (HTTP/1.0: the server closes when done).
fn http_get(port: u16, path: &str) -> Result<String, String> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_millis(200)).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(1))).map_err(|e| e.to_string())?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").map_err(|e| e.to_string())?;
    let mut out = String::new();
    s.read_to_string(&mut out).map_err(|e| e.to_string())?;
    Ok(out.split_once("\r\n\r\n").map_or(out.clone(), |(_, body)| body.to_owned()))
}

static SHARED: OnceLock<Result<NatsServer, ServerError>> = OnceLock::new();

/// The server shared by every test of this process, started on first use (never fault it:
/// other tests use it at the same time). `None` after printing `SKIPPED` when nats-server is
/// not installed and `LOCK_TEST_REQUIRE=1` is not set; any other failure panics.
pub fn shared() -> Option<&'static NatsServer> {
    match try_shared() {
        Ok(s) => Some(s),
        Err(e) if e.is_missing_binary() && !lock_testkit::server::require_servers() => {
            eprintln!("SKIPPED nats: {e}");
            None
        }
        Err(e) => panic!("shared nats-server: {e}"),
    }
}

/// The shared server, or why it could not be started.
///
/// # Errors
/// As [`NatsServer::start`].
pub fn try_shared() -> Result<&'static NatsServer, ServerError> {
    SHARED.get_or_init(NatsServer::start).as_ref().map_err(Clone::clone)
}
