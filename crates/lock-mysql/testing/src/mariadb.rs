//! A private `mariadbd` with a fresh datadir copied from a per-process template.

use super::port_accepts;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use super::{
    ManagedProcess, Probe, ServerError, Spec, TlsFiles, canonical, fault_hooks, find_binary, free_port,
    make_temp_dir, process_lifetime_dir, run_command, running_as_root,
};

/// The database created in every instance.
pub const DATABASE: &str = "locktest";
/// The password user created in every instance (`'lock'@'%'`, all privileges on [`DATABASE`]).
pub const USER: &str = "lock";
/// The password of [`USER`].
pub const PASSWORD: &str = "lockpw";

/// Flags that must be identical for `mariadb-install-db` and `mariadbd` (a different redo log
/// size would make mariadbd resize it at startup). `--no-defaults` keeps `/etc/mysql` out.
const COMMON: &[&str] = &[
    "--no-defaults",
    "--innodb-log-file-size=8M",
    "--innodb-buffer-pool-size=32M",
    "--innodb-doublewrite=0",
    "--skip-log-bin",
];

#[derive(Debug)]
struct Template {
    root: PathBuf,
    data: PathBuf,
    // Removes the template directory when the process ends; never dropped (lives in a static).
    _reaper: Mutex<Child>,
}

static TEMPLATE: OnceLock<Result<Template, ServerError>> = OnceLock::new();

/// The pristine datadir, built with `mariadb-install-db` once per process.
fn template() -> Result<&'static Path, ServerError> {
    TEMPLATE
        .get_or_init(|| {
            let install = find_binary("mariadb-install-db", "mariadb-server")?;
            let (root, reaper) = process_lifetime_dir("mdbtpl")?;
            let data = root.join("data");
            install_template(&install, &root, &data)?;
            Ok(Template { root, data, _reaper: Mutex::new(reaper) })
        })
        .as_ref()
        .map(|t| t.data.as_path())
        .map_err(Clone::clone)
}

/// Runs `mariadb-install-db` into `data`, with a private tmpdir under `root`.
///
/// The bootstrap server has been seen to crash (signal 11 while creating an internal temporary
/// table) once in a CI run, which failed a whole test binary: a crash or failure is retried into
/// a fresh datadir, and only the third failure is reported, with every attempt's output.
fn install_template(install: &Path, root: &Path, data: &Path) -> Result<(), ServerError> {
    const ATTEMPTS: usize = 3;
    let tmp = root.join("tmp");
    std::fs::create_dir_all(&tmp).map_err(|e| ServerError::io("creating the install tmpdir", e))?;
    let flag = |name: &str, value: &Path| {
        let mut s = OsString::from(name);
        s.push(value);
        s
    };
    let (datadir, tmpdir) = (flag("--datadir=", data), flag("--tmpdir=", &tmp));
    let mut failures = Vec::new();
    for _ in 0..ATTEMPTS {
        let _ = std::fs::remove_dir_all(data);
        let run = run_command(
            "mariadb-install-db",
            Command::new(install).args(COMMON).arg(&datadir).arg(&tmpdir).args([
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
                "--skip-name-resolve",
            ]),
        );
        match run {
            Ok(_) => return Ok(()),
            Err(e) => failures.push(e.to_string()),
        }
    }
    Err(ServerError::Command {
        what: "mariadb-install-db".into(),
        detail: format!("failed {ATTEMPTS} times:\n{}", failures.join("\n---\n")),
    })
}

/// The directory holding the per-process template datadir, once it has been built.
pub fn template_dir() -> Option<&'static Path> {
    TEMPLATE.get().and_then(|t| t.as_ref().ok()).map(|t| t.root.as_path())
}

/// Runs one SQL batch as root with the `mariadb` CLI, over TCP or, when `socket` is given, over
/// that unix socket (a server with `require_secure_transport` refuses plaintext TCP); returns its
/// stdout (`-N -B`: no column names, tab-separated).
pub(crate) fn query_as_root(
    client: &Path,
    port: u16,
    socket: Option<&Path>,
    sql: &str,
) -> Result<String, ServerError> {
    let mut cmd = Command::new(client);
    cmd.arg("--no-defaults");
    match socket {
        Some(path) => {
            let mut s = OsString::from("--socket=");
            s.push(path);
            cmd.arg("--protocol=socket").arg(s);
        }
        None => {
            cmd.args(["--protocol=tcp", "-h127.0.0.1", &format!("-P{port}")]);
        }
    }
    run_command("mariadb (CLI)", cmd.args(["-uroot", "-N", "-B", "--connect-timeout=2", "-e", sql]))
}

/// A private MariaDB on `127.0.0.1:port()` with database `locktest` and user `lock`/`lockpw`.
///
/// The datadir is a `cp -a` of a template built once per process (`mariadb-install-db`), all
/// under `/dev/shm` when available. Commits survive [`kill`](Self::kill) + [`restart`](Self::restart)
/// (`innodb-flush-log-at-trx-commit=2`). Dropping it kills the server and removes its directory.
#[derive(Debug)]
pub struct MariaDbServer {
    proc: ManagedProcess,
    client: PathBuf,
    datadir: PathBuf,
    socket: PathBuf,
    tls: bool,
}

impl MariaDbServer {
    /// Starts a server with the default settings.
    pub fn start() -> Result<Self, ServerError> {
        Self::start_with(&[])
    }

    /// Starts a server with extra `mariadbd` arguments appended (later ones win), e.g.
    /// `["--innodb-flush-log-at-trx-commit=1"]` for real durability.
    pub fn start_with(extra_args: &[&str]) -> Result<Self, ServerError> {
        Self::start_inner(None, extra_args)
    }

    /// Starts a server that accepts only encrypted connections: `ssl-cert`, `ssl-key` and
    /// `ssl-ca` from `tls`, and `require_secure_transport=ON`, so a plaintext TCP client is
    /// refused. Set-up and [`exec_as_root`](Self::exec_as_root) go over the unix socket (which
    /// counts as secure). Clients connect with e.g.
    /// `mysql://...?ssl-mode=verify_identity&ssl-ca=<tls.ca>`.
    pub fn start_tls(tls: &TlsFiles, extra_args: &[&str]) -> Result<Self, ServerError> {
        Self::start_inner(Some(tls), extra_args)
    }

    fn start_inner(tls: Option<&TlsFiles>, extra_args: &[&str]) -> Result<Self, ServerError> {
        let program = find_binary("mariadbd", "mariadb-server")?;
        let client = find_binary("mariadb", "mariadb-client")?;
        let template = template()?;
        super::with_port_retries(|| {
            let port = free_port()?;
            let dir = make_temp_dir("maria")?;
            let base = canonical(dir.path());
            let datadir = base.join("data");
            let socket = base.join("mysqld.sock");
            if socket.as_os_str().len() >= 100 {
                return Err(ServerError::io(
                    "choosing the unix socket path",
                    std::io::Error::other(format!("{} is too long (max 107 bytes)", socket.display())),
                ));
            }
            run_command(
                "cp -a <template datadir>",
                Command::new("cp").arg("-a").arg(template).arg(&datadir),
            )?;

            let mut args: Vec<OsString> = COMMON.iter().map(OsString::from).collect();
            if running_as_root() {
                // mariadbd refuses to run as root without it
                args.push("--user=root".into());
            }
            let mut opt = |name: &str, value: &Path| {
                let mut s = OsString::from(name);
                s.push(value);
                args.push(s);
            };
            opt("--datadir=", &datadir);
            opt("--socket=", &socket);
            opt("--pid-file=", &base.join("mysqld.pid"));
            // temporary tables and sort files stay in the instance's directory, not a shared /tmp
            opt("--tmpdir=", &base);
            args.extend(
                [
                    format!("--port={port}"),
                    "--bind-address=127.0.0.1".into(),
                    "--skip-name-resolve".into(),
                    "--skip-external-locking".into(),
                ]
                .into_iter()
                .map(OsString::from),
            );
            let tuned: &[&str] = if lock_testkit::server::durable() {
                // As packaged (10.11): the redo log flushed at every commit, the doublewrite
                // buffer, its pool and log sizes, 151 connections (the later flag wins).
                &[
                    "--innodb-flush-log-at-trx-commit=1",
                    "--innodb-doublewrite=1",
                    "--innodb-buffer-pool-size=128M",
                    "--innodb-log-file-size=96M",
                    "--max-connections=151",
                ]
            } else {
                &["--innodb-flush-log-at-trx-commit=2", "--max-connections=500"]
            };
            args.extend(tuned.iter().map(OsString::from));
            if let Some(tls) = tls {
                for (name, path) in
                    [("--ssl-cert=", &tls.cert), ("--ssl-key=", &tls.key), ("--ssl-ca=", &tls.ca)]
                {
                    let mut s = OsString::from(name);
                    s.push(path);
                    args.push(s);
                }
                args.push("--require-secure-transport=ON".into());
            }
            args.extend(extra_args.iter().map(OsString::from));
            let admin_socket = tls.map(|_| socket.clone());

            let spec = Spec::new(
                format!("mariadbd on 127.0.0.1:{port}"),
                program.clone(),
                args,
                (port, Vec::new()),
                probe(client.clone(), format!("{}/", datadir.display()), admin_socket.clone()),
                Duration::from_secs(30),
            );
            let proc = ManagedProcess::start(spec, dir)?;
            query_as_root(
                &client,
                port,
                admin_socket.as_deref(),
                &format!(
                    "CREATE DATABASE IF NOT EXISTS `{DATABASE}`; \
                     CREATE USER IF NOT EXISTS '{USER}'@'%' IDENTIFIED BY '{PASSWORD}'; \
                     GRANT ALL PRIVILEGES ON `{DATABASE}`.* TO '{USER}'@'%';"
                ),
            )?;
            Ok(MariaDbServer { proc, client: client.clone(), datadir, socket, tls: tls.is_some() })
        })
    }

    /// The client port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.proc.port()
    }

    /// `mysql://lock:lockpw@127.0.0.1:PORT/locktest`.
    pub fn url(&self) -> String {
        format!("mysql://{USER}:{PASSWORD}@127.0.0.1:{}/{DATABASE}", self.port())
    }

    /// `mysql://root@127.0.0.1:PORT/locktest` (root has no password).
    pub fn root_url(&self) -> String {
        format!("mysql://root@127.0.0.1:{}/{DATABASE}", self.port())
    }

    /// The server's datadir.
    pub fn datadir(&self) -> &Path {
        &self.datadir
    }

    /// The server's unix socket.
    pub fn socket_path(&self) -> &Path {
        &self.socket
    }

    /// Runs SQL as root through the `mariadb` CLI (blocking); returns the tab-separated rows.
    /// Handy for fault injection such as `KILL <connection id>`.
    pub fn exec_as_root(&self, sql: &str) -> Result<String, ServerError> {
        let socket = self.tls.then_some(self.socket.as_path());
        query_as_root(&self.client, self.port(), socket, sql)
    }

    /// True for a server started with [`start_tls`](Self::start_tls) (plaintext TCP refused).
    pub fn is_tls(&self) -> bool {
        self.tls
    }
}

fault_hooks!(MariaDbServer, proc);

/// `mariadb -e 'select @@datadir'` prints `datadir` (which ends in `/`); over `socket` when set
/// (a server that refuses plaintext TCP).
fn probe(client: PathBuf, datadir: String, socket: Option<PathBuf>) -> Probe {
    Probe::new(Duration::from_millis(10), move |_pid, port| {
        if !port_accepts(port) {
            return Err("port not accepting connections".into());
        }
        let got =
            query_as_root(&client, port, socket.as_deref(), "select @@datadir").map_err(|e| e.to_string())?;
        if got.trim() == datadir {
            Ok(())
        } else {
            Err(format!("select @@datadir returned {:?}, expected {datadir:?}", got.trim()))
        }
    })
}

impl lock_testkit::history::nemesis::EndSessions for MariaDbServer {
    fn how(&self) -> &'static str {
        "KILL CONNECTION"
    }
    fn end_sessions(&self) -> Result<(), ServerError> {
        let ids = self
            .exec_as_root(&format!("SELECT id FROM information_schema.processlist WHERE user = '{USER}'"))?;
        for id in ids.split_whitespace() {
            // a connection may end on its own before its turn: "Unknown thread id"
            let _ = self.exec_as_root(&format!("KILL CONNECTION {id}"));
        }
        Ok(())
    }
}
