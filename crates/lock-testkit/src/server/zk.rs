//! ZooKeeper 3.8 (Debian package): a standalone server and an N-node ensemble.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use super::{
    ManagedProcess, Probe, ServerError, Spec, TlsFiles, canonical, fault_hooks, find_binary, free_port,
    loopback, make_temp_dir, require_file,
};

mod tls;

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
        // test speed; a benchmark can pass forceSync=yes
        "forceSync=no".into(),
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
            let spec = Spec {
                what: format!(
                    "zookeeper (standalone{}) on 127.0.0.1:{port}",
                    if tls.is_some() { ", TLS" } else { "" }
                ),
                program: java.clone(),
                args,
                port,
                other_ports: Vec::new(),
                probe: Probe::Zk { data_dir: data.display().to_string() },
                ready_timeout: Duration::from_secs(40),
            };
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

// ---------------------------------------------------------------------------------------------
// Ensemble
// ---------------------------------------------------------------------------------------------

/// One member of a [`ZkEnsemble`] (`QuorumPeerMain`), with the same fault hooks as every server.
///
/// [`restart`](Self::restart) waits until the node serves as leader or follower again, which
/// needs a quorum: restart nodes together ([`ZkEnsemble::restart_nodes`]) when a majority is down.
#[derive(Debug)]
pub struct ZkNode {
    proc: ManagedProcess,
    index: usize,
    quorum_port: u16,
    election_port: u16,
}

impl ZkNode {
    /// The position of this node in the ensemble (0-based).
    pub fn index(&self) -> usize {
        self.index
    }

    /// The ZooKeeper server id (`myid`, = index + 1).
    pub fn id(&self) -> usize {
        self.index + 1
    }

    /// The client port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.proc.port()
    }

    /// The quorum (follower → leader) port.
    pub fn quorum_port(&self) -> u16 {
        self.quorum_port
    }

    /// The leader-election port.
    pub fn election_port(&self) -> u16 {
        self.election_port
    }

    /// `127.0.0.1:PORT` of this node only.
    pub fn connect_string(&self) -> String {
        format!("127.0.0.1:{}", self.port())
    }

    /// Sends a four-letter word to this node and returns the answer.
    pub fn four_letter(&self, cmd: &str) -> Result<String, ServerError> {
        four_letter_word(self.port(), cmd)
    }

    /// The `Mode:` reported by `srvr` (`leader` / `follower`), if the node serves and answers.
    pub fn mode(&self) -> Option<String> {
        if !self.is_running() || self.proc.is_paused() {
            return None;
        }
        self.four_letter("srvr").ok().as_deref().and_then(parse_mode)
    }
}

fault_hooks!(ZkNode, proc);

/// An N-node (default 3) ZooKeeper ensemble on loopback; all JVMs start in parallel.
///
/// Every node has its own directory, client/quorum/election ports and watchdog; fault hooks are
/// per node ([`node`](Self::node)). Dropping the ensemble kills all nodes.
#[derive(Debug)]
pub struct ZkEnsemble {
    nodes: Vec<ZkNode>,
}

impl ZkEnsemble {
    /// Starts a 3-node ensemble with the default settings.
    pub fn start() -> Result<Self, ServerError> {
        Self::start_sized(3, &[])
    }

    /// Starts a 3-node ensemble with extra `zoo.cfg` lines (see [`ZkServer::start_with`]).
    pub fn start_with(cfg_lines: &[&str]) -> Result<Self, ServerError> {
        Self::start_sized(3, cfg_lines)
    }

    /// Starts an ensemble of `n` nodes (n >= 1) with extra `zoo.cfg` lines.
    pub fn start_sized(n: usize, cfg_lines: &[&str]) -> Result<Self, ServerError> {
        let (java, cp) = jvm()?;
        let tick = effective_tick(cfg_lines);
        let n = n.max(1);
        super::with_port_retries(|| {
            // ports: (client, quorum, election) per node
            let mut ports = Vec::with_capacity(n);
            for _ in 0..n {
                ports.push((free_port()?, free_port()?, free_port()?));
            }
            let servers: Vec<String> = ports
                .iter()
                .enumerate()
                .map(|(i, (_, q, e))| format!("server.{}=127.0.0.1:{q}:{e}", i + 1))
                .collect();
            let mut nodes = Vec::with_capacity(n);
            for (i, &(client, quorum, election)) in ports.iter().enumerate() {
                let dir = make_temp_dir(&format!("zk{}", i + 1))?;
                let base = canonical(dir.path());
                let data = base.join("data");
                std::fs::create_dir_all(&data)
                    .map_err(|e| ServerError::io("creating the ZooKeeper dataDir", e))?;
                std::fs::write(data.join("myid"), format!("{}\n", i + 1))
                    .map_err(|e| ServerError::io("writing myid", e))?;
                let mut lines = base_config(tick, &data, client);
                // in ticks: keep them at about 5 s / 2 s whatever the tick
                lines.push(format!("initLimit={}", 5000u32.div_ceil(tick)));
                lines.push(format!("syncLimit={}", 2000u32.div_ceil(tick)));
                lines.extend(servers.iter().cloned());
                let cfg = base.join("zoo.cfg");
                write_config(&cfg, &lines, cfg_lines)?;

                let mut args: Vec<OsString> = JVM_OPTS.iter().map(OsString::from).collect();
                // caps FastLeaderElection's back-off (default 60 s) for late/restarted nodes
                args.push("-Dzookeeper.fastleader.maxNotificationInterval=1000".into());
                args.push("-cp".into());
                args.push(cp.clone());
                args.push("org.apache.zookeeper.server.quorum.QuorumPeerMain".into());
                args.push(cfg.into_os_string());
                let spec = Spec {
                    what: format!("zookeeper node {} on 127.0.0.1:{client}", i + 1),
                    program: java.clone(),
                    args,
                    port: client,
                    other_ports: vec![election],
                    probe: Probe::Zk { data_dir: data.display().to_string() },
                    ready_timeout: Duration::from_secs(60),
                };
                // spawned now, all JVMs boot in parallel; readiness is checked below
                let proc = ManagedProcess::spawn_new(spec, dir)?;
                nodes.push(ZkNode { proc, index: i, quorum_port: quorum, election_port: election });
            }
            for node in &nodes {
                node.proc.wait_ready()?;
            }
            Ok(ZkEnsemble { nodes })
        })
    }

    /// The number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Always false (an ensemble has at least one node); here for clippy's `len_without_is_empty`.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Node `i` (0-based). Panics if out of range.
    pub fn node(&self, i: usize) -> &ZkNode {
        &self.nodes[i]
    }

    /// All nodes.
    pub fn nodes(&self) -> &[ZkNode] {
        &self.nodes
    }

    /// `127.0.0.1:P1,127.0.0.1:P2,...` with every node (killed ones included).
    pub fn connect_string(&self) -> String {
        self.nodes.iter().map(ZkNode::connect_string).collect::<Vec<_>>().join(",")
    }

    /// The index of the node that reports `Mode: leader` via `srvr` right now, if any
    /// (killed and paused nodes are not asked).
    pub fn leader_index(&self) -> Option<usize> {
        self.nodes.iter().position(|n| n.mode().as_deref() == Some("leader"))
    }

    /// Waits until a leader and a majority of serving nodes (leader + followers) are seen;
    /// returns the leader's index. Use it after killing the leader.
    pub fn wait_for_quorum(&self, timeout: Duration) -> Result<usize, ServerError> {
        let started = Instant::now();
        let majority = self.nodes.len() / 2 + 1;
        loop {
            let last = self.nodes.iter().map(ZkNode::mode).collect::<Vec<_>>();
            let serving = last.iter().flatten().filter(|m| *m == "leader" || *m == "follower").count();
            if let Some(leader) = last.iter().position(|m| m.as_deref() == Some("leader"))
                && serving >= majority
            {
                return Ok(leader);
            }
            if started.elapsed() > timeout {
                return Err(ServerError::NotReady {
                    what: format!("zookeeper ensemble quorum (modes: {last:?})"),
                    waited: started.elapsed(),
                    log_tail: String::new(),
                });
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// Restarts the given nodes together (all JVMs in parallel) and waits until each serves.
    /// Needed when a majority is down: a single node cannot become ready without a quorum.
    pub fn restart_nodes(&self, indices: &[usize]) -> Result<(), ServerError> {
        for &i in indices {
            self.nodes[i].proc.respawn()?;
        }
        for &i in indices {
            self.nodes[i].proc.wait_ready()?;
        }
        Ok(())
    }
}
