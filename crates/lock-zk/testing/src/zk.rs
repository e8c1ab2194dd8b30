//! ZooKeeper 3.8 (Debian package): a standalone server and an N-node ensemble.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};

use std::time::Duration;

use super::{
    ManagedProcess, Probe, ServerError, Spec, TlsFiles, canonical, fault_hooks, find_binary, free_port,
    loopback, make_temp_dir, require_file,
};

mod ensemble;
mod tls;

pub use ensemble::{ZkEnsemble, ZkNode};

/// The default `tickTime` in ms (session timeouts are bounded below by 2 ticks: 100 ms).
pub const DEFAULT_TICK_MS: u32 = 50;

/// The four-letter words the servers answer.
const FOUR_LETTER_WHITELIST: &str =
    "ruok,srvr,stat,mntr,conf,cons,crst,srst,envi,dump,wchs,wchc,wchp,dirs,isro";

const ZK_JAR: &str = "/usr/share/java/zookeeper.jar";
const SLF4J_SIMPLE_JAR: &str = "/usr/share/java/slf4j-simple.jar";

/// JVM flags from the services notes: small heap, serial GC (2-core boxes), IPv4 loopback.
const JVM_OPTS: &[&str] = &[
    "-Xmx256m",
    "-Xms32m",
    "-XX:+UseSerialGC",
    "-XX:-UsePerfData",
    "-Djava.net.preferIPv4Stack=true",
    "-Dorg.slf4j.simpleLogger.showDateTime=true",
    "-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS",
];

/// `java` and the class path (`zookeeper.jar` pulls its dependencies through its manifest; only
/// a logging binding is added, else there are no server logs at all).
fn jvm() -> Result<(PathBuf, OsString), ServerError> {
    let java = find_binary("java", "zookeeper")?;
    let zk = require_file(ZK_JAR, "zookeeper")?;
    let slf4j = require_file(SLF4J_SIMPLE_JAR, "libslf4j-java")?;
    let mut cp = OsString::from(zk);
    cp.push(":");
    cp.push(slf4j);
    Ok((java, cp))
}

/// Sends a four-letter word (`srvr`, `mntr`, `cons`, `wchc` ...) and returns the whole answer.
pub(crate) fn four_letter_word(port: u16, cmd: &str) -> Result<String, ServerError> {
    if let Some(ca) = tls::ca_of(port) {
        return tls::four_letter_word(port, &ca, cmd);
    }
    let ctx = |e| ServerError::io(format!("four-letter word {cmd:?} to 127.0.0.1:{port}"), e);
    let mut stream = TcpStream::connect_timeout(&loopback(port), Duration::from_millis(500)).map_err(ctx)?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).map_err(ctx)?;
    stream.set_write_timeout(Some(Duration::from_secs(2))).map_err(ctx)?;
    stream.write_all(cmd.as_bytes()).map_err(ctx)?;
    let mut out = Vec::new();
    stream.read_to_end(&mut out).map_err(ctx)?;
    Ok(String::from_utf8_lossy(&out).into_owned())
}

/// The `Mode:` of a `srvr` answer (`standalone`, `leader`, `follower`, `observer`).
pub(crate) fn parse_mode(srvr: &str) -> Option<String> {
    srvr.lines().find_map(|l| l.strip_prefix("Mode:")).map(|m| m.trim().to_string())
}

/// The last `tickTime=` among the caller's config lines, else the default.
fn effective_tick(cfg_lines: &[&str]) -> u32 {
    cfg_lines
        .iter()
        .rev()
        .find_map(|l| l.trim().strip_prefix("tickTime=").and_then(|v| v.trim().parse().ok()))
        .unwrap_or(DEFAULT_TICK_MS)
        .max(1)
}

/// Lines shared by standalone and ensemble configs. `cfg_lines` are appended last, so they
/// override (ZooKeeper reads zoo.cfg with `java.util.Properties`: the last value wins).
fn base_config(tick: u32, data_dir: &Path, client_port: u16) -> Vec<String> {
    vec![
        format!("tickTime={tick}"),
        format!("dataDir={}", data_dir.display()),
        format!("clientPort={client_port}"),
        "clientPortAddress=127.0.0.1".into(),
        format!("minSessionTimeout={}", 2 * tick),
        "maxSessionTimeout=60000".into(),
        // else Jetty's AdminServer grabs 0.0.0.0:8080
        "admin.enableServer=false".into(),
        format!("4lw.commands.whitelist={FOUR_LETTER_WHITELIST}"),
        // the default is 60 connections per client IP, and every test client is 127.0.0.1
        "maxClientCnxns=0".into(),
        // KB of txn-log preallocation (default 64 MB per instance)
        "preAllocSize=1024".into(),
        "autopurge.purgeInterval=0".into(),
        // test speed; a benchmark can pass forceSync=yes, and servers run as packaged have it
        format!("forceSync={}", if lock_testkit::server::durable() { "yes" } else { "no" }),
    ]
}

fn write_config(path: &Path, lines: &[String], extra: &[&str]) -> Result<(), ServerError> {
    let mut text = lines.join("\n");
    for l in extra {
        text.push('\n');
        text.push_str(l);
    }
    text.push('\n');
    std::fs::write(path, text).map_err(|e| ServerError::io(format!("writing {}", path.display()), e))
}

// ---------------------------------------------------------------------------------------------
// Standalone
// ---------------------------------------------------------------------------------------------

/// A private standalone ZooKeeper (`ZooKeeperServerMain`) on `127.0.0.1:port()`.
///
/// Defaults: `tickTime=50` (so sessions may be as short as 100 ms), admin server off, four-letter
/// words `srvr`, `stat`, `mntr`, `conf`, `cons`, `wchc`, `wchs`, `ruok` ... enabled,
/// `maxClientCnxns=0`, `forceSync=no`, data on tmpfs. Znodes and sessions survive
/// [`kill`](Self::kill) + [`restart`](Self::restart). Dropping it kills the JVM and removes its
/// directory.
#[derive(Debug)]
pub struct ZkServer {
    proc: ManagedProcess,
    /// A [`start_tls`](Self::start_tls) server's port, known TLS-only while it lives.
    tls: Option<tls::Registered>,
}

impl ZkServer {
    /// Starts a server with the default settings.
    pub fn start() -> Result<Self, ServerError> {
        Self::start_with(&[])
    }

    /// Starts a server with extra `zoo.cfg` lines that override the defaults, e.g.
    /// `["tickTime=2000"]` or `["forceSync=yes"]`. `minSessionTimeout` follows the last
    /// `tickTime` given (2 ticks) unless set too. A custom `4lw.commands.whitelist` must keep
    /// `srvr` (readiness) and should keep `conf` (proof that the server on the port is ours).
    pub fn start_with(cfg_lines: &[&str]) -> Result<Self, ServerError> {
        Self::start_inner(cfg_lines, None)
    }

    fn start_inner(cfg_lines: &[&str], tls: Option<&TlsFiles>) -> Result<Self, ServerError> {
        let (java, mut cp) = jvm()?;
        if tls.is_some() {
            cp.push(tls::NETTY_CLASS_PATH);
        }
        let tick = effective_tick(cfg_lines);
        super::with_port_retries(|| {
            let port = free_port()?;
            let dir = make_temp_dir("zk")?;
            let base = canonical(dir.path());
            let data = base.join("data");
            std::fs::create_dir_all(&data)
                .map_err(|e| ServerError::io("creating the ZooKeeper dataDir", e))?;
            let cfg = base.join("zoo.cfg");
            let mut lines = base_config(tick, &data, port);
            let mut args: Vec<OsString> = JVM_OPTS.iter().map(OsString::from).collect();
            if let Some(files) = tls {
                args.extend(tls::serve_tls_only(files, &base, &mut lines)?);
            }
            write_config(&cfg, &lines, cfg_lines)?;

            args.push("-cp".into());
            args.push(cp.clone());
            args.push("org.apache.zookeeper.server.ZooKeeperServerMain".into());
            args.push(cfg.into_os_string());
            let spec = Spec::new(
                format!(
                    "zookeeper (standalone{}) on 127.0.0.1:{port}",
                    if tls.is_some() { ", TLS" } else { "" }
                ),
                java.clone(),
                args,
                (port, Vec::new()),
                probe(data.display().to_string()),
                Duration::from_secs(40),
            );
            // before the start: the readiness probe's four-letter words go over TLS
            let tls = tls.map(|t| tls::Registered::new(port, &t.ca));
            Ok(ZkServer { proc: ManagedProcess::start(spec, dir)?, tls })
        })
    }

    /// The client port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.proc.port()
    }

    /// `127.0.0.1:PORT`.
    pub fn connect_string(&self) -> String {
        format!("127.0.0.1:{}", self.port())
    }

    /// Sends a four-letter word (`srvr`, `mntr`, `cons`, `wchc`, `stat` ...) and returns the answer.
    pub fn four_letter(&self, cmd: &str) -> Result<String, ServerError> {
        four_letter_word(self.port(), cmd)
    }

    /// The `Mode:` reported by `srvr` (`standalone` when serving), if it answers.
    pub fn mode(&self) -> Option<String> {
        self.four_letter("srvr").ok().as_deref().and_then(parse_mode)
    }
}

fault_hooks!(ZkServer, proc);

/// `srvr` answers `Mode: standalone|leader|follower|observer`, and `conf` mentions `data_dir`.
fn probe(data_dir: String) -> Probe {
    Probe::new(Duration::from_millis(20), move |_pid, port| {
        let srvr = four_letter_word(port, "srvr").map_err(|e| e.to_string())?;
        let mode = parse_mode(&srvr).ok_or_else(|| format!("srvr: {}", srvr.trim()))?;
        if !matches!(mode.as_str(), "standalone" | "leader" | "follower" | "observer") {
            return Err(format!("srvr Mode: {mode}"));
        }
        let conf = four_letter_word(port, "conf").map_err(|e| e.to_string())?;
        // a custom whitelist without `conf` only loses the ownership check
        if conf.contains(data_dir.as_str()) || conf.contains("not in the whitelist") {
            Ok(())
        } else {
            Err(format!("conf does not mention our dataDir {data_dir}"))
        }
    })
}
