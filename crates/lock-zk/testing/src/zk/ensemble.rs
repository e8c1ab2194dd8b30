//! A ZooKeeper ensemble of `QuorumPeerMain` members on loopback, each with the fault hooks of
//! every server, for the failover and quorum-loss tests.

use std::ffi::OsString;
use std::thread;
use std::time::{Duration, Instant};

use super::{JVM_OPTS, base_config, effective_tick, four_letter_word, jvm, parse_mode, write_config};
use crate::{
    ManagedProcess, ServerError, Spec, canonical, fault_hooks, free_port, make_temp_dir, with_port_retries,
};

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

    /// Starts a 3-node ensemble with extra `zoo.cfg` lines (see [`ZkServer::start_with`](super::ZkServer::start_with)).
    pub fn start_with(cfg_lines: &[&str]) -> Result<Self, ServerError> {
        Self::start_sized(3, cfg_lines)
    }

    /// Starts an ensemble of `n` nodes (n >= 1) with extra `zoo.cfg` lines.
    pub fn start_sized(n: usize, cfg_lines: &[&str]) -> Result<Self, ServerError> {
        let (java, cp) = jvm()?;
        let tick = effective_tick(cfg_lines);
        let n = n.max(1);
        with_port_retries(|| {
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
                let spec = Spec::new(
                    format!("zookeeper node {} on 127.0.0.1:{client}", i + 1),
                    java.clone(),
                    args,
                    (client, vec![election]),
                    super::probe(data.display().to_string()),
                    Duration::from_secs(60),
                );
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

impl lock_testkit::history::nemesis::Replicated for ZkEnsemble {
    fn leader(&self) -> Option<usize> {
        self.leader_index()
    }
    fn members(&self) -> Vec<&(dyn lock_testkit::server::FaultControl + Sync)> {
        self.nodes().iter().map(|n| n as _).collect()
    }
}
