//! Readiness: proving that the process answering on the port is ours and serving.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use super::host::port_accepts;
use super::{etcd, mariadb, postgres, redis, zk};

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
    /// `etcdctl endpoint health` commits, and `member list` names the member answering `name`.
    /// `ca`: the node serves clients over TLS only, with a certificate of this CA.
    Etcd { etcdctl: PathBuf, name: String, ca: Option<PathBuf> },
    /// `psql -c 'SHOW data_directory'` (as the superuser, over TCP) prints `data_dir`.
    Postgres { bin: PathBuf, data_dir: String },
    /// `psql` through it answers `SHOW port` with the port of the PostgreSQL it pools.
    PgBouncer { bin: PathBuf, pg_port: u16 },
    /// A check written by the crate that starts the server (a store crate's `testing`
    /// module), so that a new store needs no variant here.
    Custom(CustomProbe),
}

type Check = Box<dyn Fn(u32, u16) -> Result<(), String> + Send + Sync>;

/// A readiness check of a server started outside this crate ([`Spec::custom`](super::Spec)):
/// `check(pid, port)` answers `Ok(())` once the process `pid` serves on `port` and is proved to
/// be the one started (its own name, pid or directory in an answer of the server), else what
/// it saw; it is polled every `poll` until it passes or the start times out.
pub struct CustomProbe {
    check: Check,
    poll: Duration,
}

impl CustomProbe {
    /// `check(pid, port)`, polled every `poll`.
    pub fn new(
        poll: Duration,
        check: impl Fn(u32, u16) -> Result<(), String> + Send + Sync + 'static,
    ) -> Self {
        CustomProbe { check: Box::new(check), poll }
    }
}

impl fmt::Debug for CustomProbe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CustomProbe").field("poll", &self.poll).finish_non_exhaustive()
    }
}

impl Probe {
    pub(crate) fn poll_interval(&self) -> Duration {
        match self {
            Probe::Redis { .. } => Duration::from_millis(5),
            Probe::MariaDb { .. } => Duration::from_millis(10),
            Probe::Zk { .. } => Duration::from_millis(20),
            Probe::Etcd { .. } => Duration::from_millis(50),
            Probe::Postgres { .. } | Probe::PgBouncer { .. } => Duration::from_millis(10),
            Probe::Custom(c) => c.poll,
        }
    }

    /// `Ok(())` when ready; `Err(observation)` otherwise.
    pub(crate) fn check(&self, pid: u32, port: u16) -> Result<(), String> {
        match self {
            Probe::Custom(c) => (c.check)(pid, port),
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
            Probe::Etcd { etcdctl, name, ca } => etcd::check_ready(etcdctl, port, name, ca.as_deref()),
            Probe::Postgres { bin, data_dir } => {
                if !port_accepts(port) {
                    return Err("port not accepting connections".into());
                }
                let got = postgres::psql(bin, port, "postgres", &["SHOW data_directory"])
                    .map_err(|e| e.to_string())?;
                if got.trim() == data_dir {
                    Ok(())
                } else {
                    Err(format!("SHOW data_directory returned {:?}, expected {data_dir:?}", got.trim()))
                }
            }
            Probe::PgBouncer { bin, pg_port } => {
                if !port_accepts(port) {
                    return Err("port not accepting connections".into());
                }
                let got = postgres::psql(bin, port, postgres::DATABASE, &["SHOW port"])
                    .map_err(|e| e.to_string())?;
                if got.trim() == pg_port.to_string() {
                    Ok(())
                } else {
                    Err(format!("SHOW port through it returned {:?}, expected {pg_port}", got.trim()))
                }
            }
        }
    }
}
