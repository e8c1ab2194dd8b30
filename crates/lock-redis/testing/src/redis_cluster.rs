//! A Redis Cluster of private `redis-server`s: N masters sharing the 16384 slots evenly, and
//! optionally replicas of each master (for failover tests).

use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use super::redis::query;
use super::{RedisServer, ServerError, find_binary, free_port, run_command};

/// How long a node may be unreachable before the others mark it failed (and a replica takes
/// over its slots). Short, so a failover test is quick; long enough that a loaded test
/// machine does not fail nodes over by itself.
pub const CLUSTER_NODE_TIMEOUT_MS: u64 = 1000;

/// A Redis Cluster on loopback: every node a [`RedisServer`] with `--cluster-enabled yes`
/// (no persistence, its own directory, its cluster bus on another free port), joined with
/// `redis-cli --cluster create`. Ready when every live node reports `cluster_state:ok` with all
/// slots assigned and every node known.
///
/// Dropping it kills every node. The fault hooks are on each node ([`node`](Self::node)).
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts `masters` masters and `replicas` replicas of each (`redis-cli` assigns them; ask
    /// [`masters`](Self::masters) for the roles). About 2 s: a new master waits 2 s before it
    /// serves writes (`CLUSTER_WRITABLE_DELAY`).
    pub fn start(masters: usize, replicas: usize) -> Result<Self, ServerError> {
        let cli = find_binary("redis-cli", "redis-tools")?;
        let mut nodes = Vec::with_capacity(masters * (1 + replicas));
        for _ in 0..masters * (1 + replicas) {
            // The bus port defaults to port + 10000, which may be taken or out of range.
            let bus = free_port()?.to_string();
            let timeout = CLUSTER_NODE_TIMEOUT_MS.to_string();
            nodes.push(RedisServer::start_with(&[
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-port",
                &bus,
                "--cluster-node-timeout",
                &timeout,
            ])?);
        }
        let mut create = Command::new(cli);
        create.arg("--cluster").arg("create");
        for n in &nodes {
            create.arg(format!("127.0.0.1:{}", n.port()));
        }
        create.args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"]);
        run_command("redis-cli --cluster create", &mut create)?;
        let cluster = RedisCluster { nodes };
        cluster.wait_ok(Duration::from_secs(30))?;
        Ok(cluster)
    }

    /// Every node, masters and replicas, in start order.
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// Node `i` (start order), for its fault hooks.
    pub fn node(&self, i: usize) -> &RedisServer {
        &self.nodes[i]
    }

    /// `redis+cluster://127.0.0.1:p1,127.0.0.1:p2,...` with every node as a seed.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self.nodes.iter().map(|n| format!("127.0.0.1:{}", n.port())).collect();
        format!("redis+cluster://{}/", hosts.join(","))
    }

    /// One command to node `i` (single-line or bulk replies only: `CLUSTER INFO`,
    /// `CLUSTER NODES`, `CLUSTER KEYSLOT`, `CLUSTER SETSLOT`, `MIGRATE` ...).
    pub fn command(&self, i: usize, args: &[&str]) -> Result<String, ServerError> {
        query(self.nodes[i].port(), args)
    }

    /// The indices of the nodes that are masters with slots, as a live node sees it.
    pub fn masters(&self) -> Result<Vec<usize>, ServerError> {
        let view = self.cluster_nodes()?;
        Ok(view
            .iter()
            .filter(|n| n.master && !n.slots.is_empty())
            .filter_map(|n| self.index_of(n.port))
            .collect())
    }

    /// The index of the master that owns `slot`, as a live node sees it.
    pub fn owner_of_slot(&self, slot: u16) -> Result<Option<usize>, ServerError> {
        let view = self.cluster_nodes()?;
        Ok(view
            .iter()
            .filter(|n| n.master && n.slots.iter().any(|&(a, b)| (a..=b).contains(&slot)))
            .find_map(|n| self.index_of(n.port)))
    }

    /// The cluster node id of node `i`.
    pub fn node_id(&self, i: usize) -> Result<String, ServerError> {
        Ok(self.command(i, &["CLUSTER", "MYID"])?.trim().to_owned())
    }

    /// The hash slot of `key`.
    pub fn keyslot(&self, key: &str) -> Result<u16, ServerError> {
        let live = self.live_node()?;
        let s = self.command(live, &["CLUSTER", "KEYSLOT", key])?;
        s.trim().parse().map_err(|_| ServerError::Protocol { what: "CLUSTER KEYSLOT".into(), detail: s })
    }

    /// Waits until every live node reports `cluster_state:ok`, all 16384 slots assigned to
    /// masters every live node agrees on, and no node flagged failing (after a failover: the
    /// replica promoted and the news gossiped everywhere).
    pub fn wait_ok(&self, timeout: Duration) -> Result<(), ServerError> {
        let started = Instant::now();
        loop {
            let last = match self.check_ok() {
                Ok(()) => return Ok(()),
                Err(observation) => observation,
            };
            if started.elapsed() > timeout {
                return Err(ServerError::NotReady {
                    what: format!("redis cluster ({last})"),
                    waited: started.elapsed(),
                    log_tail: String::new(),
                });
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    fn check_ok(&self) -> Result<(), String> {
        let mut views = Vec::new();
        for (i, n) in self.nodes.iter().enumerate().filter(|(_, n)| n.is_running()) {
            let info = self.command(i, &["CLUSTER", "INFO"]).map_err(|e| e.to_string())?;
            for want in ["cluster_state:ok", "cluster_slots_assigned:16384", "cluster_slots_ok:16384"] {
                if !info.lines().any(|l| l.trim() == want) {
                    return Err(format!("node {} lacks {want}", n.port()));
                }
            }
            let mut view: Vec<(u16, Vec<(u16, u16)>)> =
                parse_nodes(&self.command(i, &["CLUSTER", "NODES"]).map_err(|e| e.to_string())?)
                    .into_iter()
                    .filter(|n| n.master && !n.slots.is_empty())
                    .map(|n| {
                        if n.failing {
                            return Err(format!("a master on {} is flagged failing", n.port));
                        }
                        Ok((n.port, n.slots))
                    })
                    .collect::<Result<_, String>>()?;
            view.sort();
            views.push(view);
        }
        if views.windows(2).any(|w| w[0] != w[1]) {
            return Err("the nodes disagree on the slot map".into());
        }
        Ok(())
    }

    fn live_node(&self) -> Result<usize, ServerError> {
        self.nodes
            .iter()
            .position(|n| n.is_running())
            .ok_or_else(|| ServerError::NotRunning { what: "every redis cluster node".into() })
    }

    fn cluster_nodes(&self) -> Result<Vec<NodeLine>, ServerError> {
        let live = self.live_node()?;
        Ok(parse_nodes(&self.command(live, &["CLUSTER", "NODES"])?))
    }

    fn index_of(&self, port: u16) -> Option<usize> {
        self.nodes.iter().position(|n| n.port() == port)
    }
}

/// One line of `CLUSTER NODES`.
struct NodeLine {
    port: u16,
    master: bool,
    failing: bool,
    slots: Vec<(u16, u16)>,
}

/// `<id> <ip:port@bus> <flags> <master> <ping> <pong> <epoch> <link> <slot> <slot> ...`
fn parse_nodes(text: &str) -> Vec<NodeLine> {
    text.lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let port = f.get(1)?.split('@').next()?.rsplit(':').next()?.parse().ok()?;
            let flags = f.get(2)?;
            let slots = f
                .iter()
                .skip(8)
                .filter(|s| !s.starts_with('['))
                .filter_map(|s| match s.split_once('-') {
                    Some((a, b)) => Some((a.parse().ok()?, b.parse().ok()?)),
                    None => s.parse().ok().map(|a| (a, a)),
                })
                .collect();
            Some(NodeLine {
                port,
                master: flags.split(',').any(|f| f == "master"),
                failing: flags.split(',').any(|f| f == "fail" || f == "fail?"),
                slots,
            })
        })
        .collect()
}
