//! etcd 3.4 (Debian's `etcd-server` and `etcd-client`): a single node and a 3-node cluster.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use super::{
    ManagedProcess, Probe, ServerError, Spec, TlsFiles, canonical, fault_hooks, find_binary, free_port,
    make_temp_dir, run_command,
};

/// Raft timings for tests: elections within a few hundred ms, and a minimum lease TTL of 1 s
/// (etcd's floor is 1.5 election timeouts, rounded up to whole seconds).
const TIMING: &[&str] = &["--heartbeat-interval", "20", "--election-timeout", "200"];

fn binaries() -> Result<(PathBuf, PathBuf), ServerError> {
    Ok((find_binary("etcd", "etcd-server")?, find_binary("etcdctl", "etcd-client")?))
}

/// Runs `etcdctl` (API v3) against `endpoints` (`host:port`) with short timeouts and returns
/// its stdout; over TLS trusting `ca` when given.
pub(crate) fn etcdctl(
    etcdctl: &Path,
    endpoints: &str,
    ca: Option<&Path>,
    args: &[&str],
) -> Result<String, ServerError> {
    let mut cmd = Command::new(etcdctl);
    cmd.env("ETCDCTL_API", "3");
    match ca {
        Some(ca) => cmd.arg(format!("--endpoints=https://{endpoints}")).arg("--cacert").arg(ca),
        None => cmd.arg(format!("--endpoints={endpoints}")),
    };
    cmd.args(["--dial-timeout=1s", "--command-timeout=2s"]).args(args);
    run_command(&format!("etcdctl {}", args.join(" ")), &mut cmd)
}

/// The first unsigned number after `"field":` in `json`, from `from` on.
fn json_u64(json: &str, field: &str) -> Option<u64> {
    let at = json.find(&format!("\"{field}\":"))? + field.len() + 3;
    let digits: String = json[at..].chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// Readiness of the etcd member `name` on `port`: it commits a proposal (`endpoint health`,
/// so a cluster member has a quorum), and the member answering is the one called `name` (the
/// header's `member_id` in `member list` is the member named so: our process, not a stranger
/// on a reused port).
pub(crate) fn check_ready(ctl: &Path, port: u16, name: &str, ca: Option<&Path>) -> Result<(), String> {
    let endpoint = format!("127.0.0.1:{port}");
    etcdctl(ctl, &endpoint, ca, &["endpoint", "health"]).map_err(|e| e.to_string())?;
    let list = etcdctl(ctl, &endpoint, ca, &["member", "list", "-w", "json"]).map_err(|e| e.to_string())?;
    let me = json_u64(&list, "member_id").ok_or_else(|| format!("member list without member_id: {list}"))?;
    if list.contains(&format!("{{\"ID\":{me},\"name\":\"{name}\"")) {
        Ok(())
    } else {
        Err(format!("the member answering (id {me}) is not {name:?}: {list}"))
    }
}

/// One member's command line; with `tls`, clients are served over TLS only.
fn args(
    name: &str,
    data: &Path,
    (client, peer): (u16, u16),
    cluster: &str,
    tls: Option<&TlsFiles>,
    extra: &[&str],
) -> Vec<OsString> {
    let client_url = format!("{}://127.0.0.1:{client}", if tls.is_some() { "https" } else { "http" });
    let peer_url = format!("http://127.0.0.1:{peer}");
    let mut a: Vec<OsString> = vec![
        "--name".into(),
        name.into(),
        "--data-dir".into(),
        data.as_os_str().to_owned(),
        "--listen-client-urls".into(),
        client_url.clone().into(),
        "--advertise-client-urls".into(),
        client_url.into(),
        "--listen-peer-urls".into(),
        peer_url.clone().into(),
        "--initial-advertise-peer-urls".into(),
        peer_url.into(),
        "--initial-cluster".into(),
        cluster.into(),
        "--initial-cluster-state".into(),
        "new".into(),
        "--initial-cluster-token".into(),
        name.split('-').next().unwrap_or(name).into(),
        "--logger".into(),
        "zap".into(),
        "--log-outputs".into(),
        "stderr".into(),
    ];
    if let Some(tls) = tls {
        a.extend([
            "--cert-file".into(),
            tls.cert.clone().into(),
            "--key-file".into(),
            tls.key.clone().into(),
        ]);
    }
    a.extend(TIMING.iter().chain(extra).map(OsString::from));
    a
}

/// A unique member name: the temp directory's own name (so no two servers of any test process
/// share one, and readiness can tell ours from a stranger).
fn member_name(dir: &Path, kind: &str) -> String {
    let tag: String = dir
        .file_name()
        .map(|n| n.to_string_lossy().chars().filter(char::is_ascii_alphanumeric).collect())
        .unwrap_or_default();
    format!("{kind}-{tag}")
}

// ---------------------------------------------------------------------------------------------
// Single node
// ---------------------------------------------------------------------------------------------

/// A private single-node etcd on `127.0.0.1:port()`, data on tmpfs, test Raft timings (lease
/// TTLs down to 1 s). Keys and leases survive [`kill`](Self::kill) + [`restart`](Self::restart).
/// Dropping it kills the process and removes its directory.
#[derive(Debug)]
pub struct EtcdServer {
    proc: ManagedProcess,
    etcdctl: PathBuf,
    /// The CA of a TLS-only node.
    ca: Option<PathBuf>,
}

impl EtcdServer {
    /// Starts a node with the default settings.
    pub fn start() -> Result<Self, ServerError> {
        Self::start_with(&[])
    }

    /// Starts a node with extra `etcd` flags (they come last, so they override).
    pub fn start_with(extra: &[&str]) -> Result<Self, ServerError> {
        Self::start_inner(None, extra)
    }

    /// Starts a node that serves clients over TLS only, with `tls`'s certificate and key
    /// (`etcds://` URLs; `etcdctl` trusts `tls.ca`).
    pub fn start_tls(tls: &TlsFiles) -> Result<Self, ServerError> {
        Self::start_inner(Some(tls), &[])
    }

    fn start_inner(tls: Option<&TlsFiles>, extra: &[&str]) -> Result<Self, ServerError> {
        let (etcd, ctl) = binaries()?;
        let ca = tls.map(|t| t.ca.clone());
        super::with_port_retries(|| {
            let (port, peer) = (free_port()?, free_port()?);
            let dir = make_temp_dir("etcd")?;
            let base = canonical(dir.path());
            let name = member_name(&base, "etcd");
            let cluster = format!("{name}=http://127.0.0.1:{peer}");
            let spec = Spec::new(
                format!("etcd on 127.0.0.1:{port}"),
                etcd.clone(),
                args(&name, &base.join("data"), (port, peer), &cluster, tls, extra),
                (port, vec![peer]),
                probe(ctl.clone(), name, ca.clone()),
                Duration::from_secs(30),
            );
            Ok(EtcdServer { proc: ManagedProcess::start(spec, dir)?, etcdctl: ctl.clone(), ca: ca.clone() })
        })
    }

    /// The client port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.proc.port()
    }

    /// `127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("127.0.0.1:{}", self.port())
    }

    /// `etcd://127.0.0.1:PORT/<prefix>` (`etcds://` for a TLS node; `prefix` without a leading
    /// slash).
    pub fn url(&self, prefix: &str) -> String {
        let scheme = if self.ca.is_some() { "etcds" } else { "etcd" };
        format!("{scheme}://{}/{prefix}", self.endpoint())
    }

    /// Runs `etcdctl` (API v3) against this node and returns its stdout.
    pub fn etcdctl(&self, args: &[&str]) -> Result<String, ServerError> {
        etcdctl(&self.etcdctl, &self.endpoint(), self.ca.as_deref(), args)
    }
}

fault_hooks!(EtcdServer, proc);

// ---------------------------------------------------------------------------------------------
// Cluster
// ---------------------------------------------------------------------------------------------

/// One member of an [`EtcdCluster`], with the same fault hooks as every server.
///
/// [`restart`](Self::restart) waits until the member commits again, which needs a quorum.
#[derive(Debug)]
pub struct EtcdNode {
    proc: ManagedProcess,
    index: usize,
    etcdctl: PathBuf,
}

impl EtcdNode {
    /// The position of this member in the cluster (0-based).
    pub fn index(&self) -> usize {
        self.index
    }

    /// The client port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.proc.port()
    }

    /// `127.0.0.1:PORT` of this member only.
    pub fn endpoint(&self) -> String {
        format!("127.0.0.1:{}", self.port())
    }

    /// Runs `etcdctl` (API v3) against this member only.
    pub fn etcdctl(&self, args: &[&str]) -> Result<String, ServerError> {
        etcdctl(&self.etcdctl, &self.endpoint(), None, args)
    }

    /// Whether this member is the leader now (`None`: killed, paused or not answering).
    pub fn is_leader(&self) -> Option<bool> {
        if !self.is_running() || self.proc.is_paused() {
            return None;
        }
        let status = self.etcdctl(&["endpoint", "status", "-w", "json"]).ok()?;
        let me = json_u64(&status, "member_id")?;
        let leader = json_u64(&status, "leader")?;
        Some(leader != 0 && leader == me)
    }
}

fault_hooks!(EtcdNode, proc);

/// A 3-member etcd cluster on loopback; all members start in parallel. Every member has its
/// own directory, ports and watchdog; fault hooks are per member ([`node`](Self::node)).
/// Dropping the cluster kills all members.
#[derive(Debug)]
pub struct EtcdCluster {
    nodes: Vec<EtcdNode>,
}

impl EtcdCluster {
    /// Starts a 3-member cluster with the default settings.
    pub fn start() -> Result<Self, ServerError> {
        Self::start_with(&[])
    }

    /// Starts a 3-member cluster with extra `etcd` flags for every member.
    pub fn start_with(extra: &[&str]) -> Result<Self, ServerError> {
        let (etcd, ctl) = binaries()?;
        super::with_port_retries(|| {
            let mut ports = Vec::with_capacity(3);
            let mut dirs = Vec::with_capacity(3);
            for _ in 0..3 {
                ports.push((free_port()?, free_port()?));
                dirs.push(make_temp_dir("etcdc")?);
            }
            let names: Vec<String> =
                dirs.iter().map(|d| member_name(&canonical(d.path()), "etcdc")).collect();
            let cluster: Vec<String> = names
                .iter()
                .zip(&ports)
                .map(|(n, (_, peer))| format!("{n}=http://127.0.0.1:{peer}"))
                .collect();
            let cluster = cluster.join(",");
            let mut nodes = Vec::with_capacity(3);
            for (index, ((dir, name), &(client, peer))) in dirs.into_iter().zip(names).zip(&ports).enumerate()
            {
                let base = canonical(dir.path());
                let mut a = args(&name, &base.join("data"), (client, peer), &cluster, None, extra);
                // One token for the cluster (`args` derives it from the member name).
                if let Some(i) = a.iter().position(|x| x == "--initial-cluster-token") {
                    a[i + 1] = "etcdc-cluster".into();
                }
                let spec = Spec::new(
                    format!("etcd member {} on 127.0.0.1:{client}", index + 1),
                    etcd.clone(),
                    a,
                    (client, vec![peer]),
                    probe(ctl.clone(), name, None),
                    Duration::from_secs(30),
                );
                // Spawned now, all members boot in parallel; readiness (a quorum) is checked below.
                let proc = ManagedProcess::spawn_new(spec, dir)?;
                nodes.push(EtcdNode { proc, index, etcdctl: ctl.clone() });
            }
            for node in &nodes {
                node.proc.wait_ready()?;
            }
            Ok(EtcdCluster { nodes })
        })
    }

    /// Member `i` (0-based). Panics if out of range.
    pub fn node(&self, i: usize) -> &EtcdNode {
        &self.nodes[i]
    }

    /// All members.
    pub fn nodes(&self) -> &[EtcdNode] {
        &self.nodes
    }

    /// Every member's `127.0.0.1:PORT` (killed ones included).
    pub fn endpoints(&self) -> Vec<String> {
        self.nodes.iter().map(EtcdNode::endpoint).collect()
    }

    /// `etcd://h1:p1,h2:p2,h3:p3/<prefix>`.
    pub fn url(&self, prefix: &str) -> String {
        format!("etcd://{}/{prefix}", self.endpoints().join(","))
    }

    /// The index of the member that is the leader now, if any answers so.
    pub fn leader_index(&self) -> Option<usize> {
        self.nodes.iter().position(|n| n.is_leader() == Some(true))
    }

    /// Waits until a live member is the leader and returns its index. Use it after killing the
    /// leader.
    pub fn wait_for_leader(&self, timeout: Duration) -> Result<usize, ServerError> {
        let started = Instant::now();
        loop {
            if let Some(i) = self.leader_index() {
                return Ok(i);
            }
            if started.elapsed() > timeout {
                return Err(ServerError::NotReady {
                    what: "etcd cluster leader".to_owned(),
                    waited: started.elapsed(),
                    log_tail: String::new(),
                });
            }
            thread::sleep(Duration::from_millis(20));
        }
    }
}

/// `etcdctl endpoint health` commits, and `member list` names the member answering `name`.
/// `ca`: the node serves clients over TLS only, with a certificate of this CA.
fn probe(etcdctl: PathBuf, name: String, ca: Option<PathBuf>) -> Probe {
    Probe::new(Duration::from_millis(50), move |_pid, port| check_ready(&etcdctl, port, &name, ca.as_deref()))
}

impl lock_testkit::history::nemesis::Replicated for EtcdCluster {
    fn leader(&self) -> Option<usize> {
        self.leader_index()
    }
    fn members(&self) -> Vec<&(dyn lock_testkit::server::FaultControl + Sync)> {
        self.nodes().iter().map(|n| n as _).collect()
    }
}

impl lock_testkit::history::nemesis::EndSessions for EtcdServer {
    fn how(&self) -> &'static str {
        "leases revoked"
    }
    fn end_sessions(&self) -> Result<(), ServerError> {
        let leases = self.etcdctl(&["lease", "list"])?;
        // "found N leases", then one hexadecimal id per line
        for id in leases.lines().skip(1).map(str::trim).filter(|l| !l.is_empty()) {
            // a lease may expire or be revoked by its holder before its turn
            let _ = self.etcdctl(&["lease", "revoke", id]);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::json_u64;

    #[test]
    fn json_numbers_are_found() {
        let s = r#"{"header":{"cluster_id":1,"member_id":42},"leader":42}"#;
        assert_eq!(
            (json_u64(s, "member_id"), json_u64(s, "leader"), json_u64(s, "nope")),
            (Some(42), Some(42), None)
        );
    }
}
