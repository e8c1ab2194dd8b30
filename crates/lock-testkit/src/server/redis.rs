//! A standalone `redis-server` without persistence.

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use super::{
    ManagedProcess, Probe, ServerError, Spec, fault_hooks, find_binary, free_port, loopback, make_temp_dir,
};

/// A private `redis-server` on `127.0.0.1:port()`, started with `--save '' --appendonly no`
/// (no persistence: a restart comes back empty) in its own temp directory.
///
/// Dropping it kills the server and removes the directory.
#[derive(Debug)]
pub struct RedisServer {
    proc: ManagedProcess,
    password: Option<String>,
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
        let program = find_binary("redis-server", "redis-server")?;
        let password = extra_args
            .iter()
            .position(|a| *a == "--requirepass")
            .and_then(|i| extra_args.get(i + 1))
            .map(|s| s.to_string());
        super::with_port_retries(|| {
            let port = free_port()?;
            let dir = make_temp_dir("redis")?;
            let mut args: Vec<OsString> = [
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--daemonize",
                "no",
                "--save",
                "",
                "--appendonly",
                "no",
            ]
            .iter()
            .map(OsString::from)
            .collect();
            args.push("--dir".into());
            args.push(super::canonical(dir.path()).into_os_string());
            args.extend(extra_args.iter().map(OsString::from));
            let spec = Spec {
                what: format!("redis-server on 127.0.0.1:{port}"),
                program: program.clone(),
                args,
                port,
                other_ports: Vec::new(),
                probe: Probe::Redis { password: password.clone() },
                ready_timeout: Duration::from_secs(15),
            };
            let proc = ManagedProcess::start(spec, dir)?;
            Ok(RedisServer { proc, password: password.clone() })
        })
    }

    /// The client port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.proc.port()
    }

    /// `redis://127.0.0.1:PORT/`, or `redis://:PASSWORD@127.0.0.1:PORT/` if the server was
    /// started with `--requirepass PASSWORD`.
    pub fn url(&self) -> String {
        match &self.password {
            Some(pw) => format!("redis://:{pw}@127.0.0.1:{}/", self.port()),
            None => format!("redis://127.0.0.1:{}/", self.port()),
        }
    }
}

fault_hooks!(RedisServer, proc);

/// Sends one command as a RESP array and reads one reply (simple string, error, integer or bulk
/// string). Errors are returned as [`ServerError::Protocol`].
fn command(stream: &mut BufReader<TcpStream>, args: &[&str]) -> Result<String, ServerError> {
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

/// `INFO server` over a plain TCP connection (with `AUTH` first if a password is given).
pub(crate) fn info_server(port: u16, password: Option<&str>) -> Result<String, ServerError> {
    let stream = TcpStream::connect_timeout(&loopback(port), Duration::from_millis(250))
        .map_err(|e| ServerError::io(format!("connecting to 127.0.0.1:{port}"), e))?;
    let timeout = Some(Duration::from_secs(1));
    let _ = stream.set_read_timeout(timeout);
    let _ = stream.set_write_timeout(timeout);
    let mut stream = BufReader::new(stream);
    if let Some(pw) = password {
        command(&mut stream, &["AUTH", pw])?;
    }
    command(&mut stream, &["INFO", "server"])
}
