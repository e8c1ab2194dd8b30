//! A standalone `redis-server` without persistence.

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::path::PathBuf;
use std::time::Duration;

use super::{
    ManagedProcess, Probe, ServerError, Spec, TlsFiles, fault_hooks, find_binary, free_port, loopback,
    make_temp_dir,
};

/// A private `redis-server` on `127.0.0.1:port()`, started with `--save '' --appendonly no`
/// (no persistence: a restart comes back empty) in its own temp directory. A process that chose
/// `Durability::Packaged` keeps the packaged snapshots (`--save` unset).
///
/// Dropping it kills the server and removes the directory.
#[derive(Debug)]
pub struct RedisServer {
    proc: ManagedProcess,
    password: Option<String>,
    tls: bool,
}

impl RedisServer {
    /// Starts a server with the default settings.
    pub fn start() -> Result<Self, ServerError> {
        Self::start_with(&[])
    }

    /// Starts a server with extra `redis-server` arguments appended, e.g.
    /// `["--requirepass", "x"]` or `["--appendonly", "yes", "--appendfsync", "always"]`
    /// (later arguments override earlier ones).
    pub fn start_with(extra_args: &[&str]) -> Result<Self, ServerError> {
        Self::start_inner(None, extra_args)
    }

    /// Starts a server that speaks only TLS: `--port 0` (no plaintext listener) and
    /// `--tls-port` on [`port`](Self::port), with `tls`'s certificate and key, its CA for client
    /// certificates and `--tls-auth-clients no` (extra arguments may override it). Readiness is
    /// probed over a private unix socket.
    pub fn start_tls(tls: &TlsFiles, extra_args: &[&str]) -> Result<Self, ServerError> {
        Self::start_inner(Some(tls), extra_args)
    }

    fn start_inner(tls: Option<&TlsFiles>, extra_args: &[&str]) -> Result<Self, ServerError> {
        let program = find_binary("redis-server", "redis-server")?;
        let password = extra_args
            .iter()
            .position(|a| *a == "--requirepass")
            .and_then(|i| extra_args.get(i + 1))
            .map(|s| s.to_string());
        super::with_port_retries(|| {
            let port = free_port()?;
            let dir = make_temp_dir("redis")?;
            let base = super::canonical(dir.path());
            let (plain_port, unix) = match tls {
                Some(_) => ("0".to_owned(), Some(base.join("redis.sock"))),
                None => (port.to_string(), None),
            };
            let mut args: Vec<OsString> =
                ["--port", &plain_port, "--bind", "127.0.0.1", "--daemonize", "no", "--appendonly", "no"]
                    .iter()
                    .map(OsString::from)
                    .collect();
            if !lock_testkit::server::durable() {
                // As packaged, the server snapshots to its directory now and then.
                args.extend(["--save", ""].map(OsString::from));
            }
            args.push("--dir".into());
            args.push(base.into_os_string());
            if let (Some(tls), Some(unix)) = (tls, &unix) {
                args.extend(["--tls-port".into(), port.to_string().into()]);
                for (flag, path) in [
                    ("--tls-cert-file", &tls.cert),
                    ("--tls-key-file", &tls.key),
                    ("--tls-ca-cert-file", &tls.ca),
                ] {
                    args.extend([OsString::from(flag), path.clone().into_os_string()]);
                }
                args.extend(["--tls-auth-clients", "no", "--unixsocketperm", "700"].map(OsString::from));
                args.extend([OsString::from("--unixsocket"), unix.clone().into_os_string()]);
            }
            args.extend(extra_args.iter().map(OsString::from));
            let spec = Spec::new(
                format!("redis-server on 127.0.0.1:{port}{}", if tls.is_some() { " (TLS)" } else { "" }),
                program.clone(),
                args,
                (port, Vec::new()),
                probe(password.clone(), unix.clone()),
                Duration::from_secs(15),
            );
            let proc = ManagedProcess::start(spec, dir)?;
            Ok(RedisServer { proc, password: password.clone(), tls: tls.is_some() })
        })
    }

    /// The client port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.proc.port()
    }

    /// `redis://127.0.0.1:PORT/`, or `redis://:PASSWORD@127.0.0.1:PORT/` if the server was
    /// started with `--requirepass PASSWORD`; `rediss://` for a [`start_tls`](Self::start_tls)
    /// server. The password is put in as given (percent-encode it if it needs that).
    pub fn url(&self) -> String {
        let scheme = if self.tls { "rediss" } else { "redis" };
        match &self.password {
            Some(pw) => format!("{scheme}://:{pw}@127.0.0.1:{}/", self.port()),
            None => format!("{scheme}://127.0.0.1:{}/", self.port()),
        }
    }

    /// True for a server started with [`start_tls`](Self::start_tls) (no plaintext port).
    pub fn is_tls(&self) -> bool {
        self.tls
    }

    /// One command over a fresh plain TCP connection (after `AUTH` when the server has a
    /// password), one reply (not arrays): fault injection such as `CLIENT KILL TYPE normal`.
    /// Not for a [`start_tls`](Self::start_tls) server.
    pub fn command(&self, args: &[&str]) -> Result<String, ServerError> {
        let timeout = Some(Duration::from_secs(1));
        let port = self.port();
        let stream = TcpStream::connect_timeout(&loopback(port), Duration::from_millis(250))
            .map_err(|e| ServerError::io(format!("connecting to 127.0.0.1:{port}"), e))?;
        let _ = stream.set_read_timeout(timeout);
        let _ = stream.set_write_timeout(timeout);
        let mut stream = BufReader::new(stream);
        if let Some(pw) = &self.password {
            command(&mut stream, &["AUTH", pw])?;
        }
        command(&mut stream, args)
    }
}

fault_hooks!(RedisServer, proc);

/// Sends one command as a RESP array and reads one reply (simple string, error, integer or bulk
/// string). Errors are returned as [`ServerError::Protocol`].
fn command<S: Read + Write>(stream: &mut BufReader<S>, args: &[&str]) -> Result<String, ServerError> {
    let mut req = format!("*{}\r\n", args.len());
    for a in args {
        req.push_str(&format!("${}\r\n{a}\r\n", a.len()));
    }
    let io = |e| ServerError::io("talking RESP to redis", e);
    stream.get_mut().write_all(req.as_bytes()).map_err(io)?;
    let mut line = String::new();
    stream.read_line(&mut line).map_err(io)?;
    let line = line.trim_end();
    let proto = |detail: String| ServerError::Protocol { what: format!("redis {}", args[0]), detail };
    match line.as_bytes().first() {
        Some(b'+') | Some(b':') => Ok(line[1..].to_string()),
        Some(b'-') => Err(proto(line[1..].to_string())),
        Some(b'$') => {
            let len: i64 = line[1..].parse().map_err(|_| proto(format!("bad bulk length {line:?}")))?;
            let Ok(len) = usize::try_from(len) else { return Ok(String::new()) }; // nil
            let mut buf = vec![0u8; len + 2];
            stream.read_exact(&mut buf).map_err(io)?;
            buf.truncate(len);
            Ok(String::from_utf8_lossy(&buf).into_owned())
        }
        _ => Err(proto(format!("unexpected reply {line:?}"))),
    }
}

/// `INFO server` over a plain TCP connection, or over the unix socket `unix` when given (a TLS
/// server's), with `AUTH` first if a password is given.
pub(crate) fn info_server(
    port: u16,
    unix: Option<&Path>,
    password: Option<&str>,
) -> Result<String, ServerError> {
    let timeout = Some(Duration::from_secs(1));
    match unix {
        Some(path) => {
            let stream = UnixStream::connect(path)
                .map_err(|e| ServerError::io(format!("connecting to {}", path.display()), e))?;
            let _ = stream.set_read_timeout(timeout);
            let _ = stream.set_write_timeout(timeout);
            info_on(BufReader::new(stream), password)
        }
        None => {
            let stream = TcpStream::connect_timeout(&loopback(port), Duration::from_millis(250))
                .map_err(|e| ServerError::io(format!("connecting to 127.0.0.1:{port}"), e))?;
            let _ = stream.set_read_timeout(timeout);
            let _ = stream.set_write_timeout(timeout);
            info_on(BufReader::new(stream), password)
        }
    }
}

/// One command to the plain TCP port `port` (1 s timeouts), one reply as [`command`] reads it
/// (not arrays): for the cluster and sentinel fixtures' `CLUSTER INFO`, `INFO`, `CLUSTER NODES`.
pub(crate) fn query(port: u16, args: &[&str]) -> Result<String, ServerError> {
    let timeout = Some(Duration::from_secs(1));
    let stream = TcpStream::connect_timeout(&loopback(port), Duration::from_millis(250))
        .map_err(|e| ServerError::io(format!("connecting to 127.0.0.1:{port}"), e))?;
    let _ = stream.set_read_timeout(timeout);
    let _ = stream.set_write_timeout(timeout);
    command(&mut BufReader::new(stream), args)
}

fn info_on<S: Read + Write>(mut stream: BufReader<S>, password: Option<&str>) -> Result<String, ServerError> {
    if let Some(pw) = password {
        command(&mut stream, &["AUTH", pw])?;
    }
    command(&mut stream, &["INFO", "server"])
}

/// `INFO server` reports `process_id:<pid>` (over `unix` when set: a TLS-only server's socket).
pub(crate) fn probe(password: Option<String>, unix: Option<PathBuf>) -> Probe {
    Probe::new(Duration::from_millis(5), move |pid, port| {
        let info = info_server(port, unix.as_deref(), password.as_deref()).map_err(|e| e.to_string())?;
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
    })
}

impl lock_testkit::history::nemesis::EndSessions for RedisServer {
    fn how(&self) -> &'static str {
        "CLIENT KILL"
    }
    fn end_sessions(&self) -> Result<(), ServerError> {
        self.command(&["CLIENT", "KILL", "TYPE", "normal"])?;
        self.command(&["CLIENT", "KILL", "TYPE", "pubsub"]).map(drop)
    }
}
