//! A private PostgreSQL (`postgres`) with a fresh data directory copied from a per-process
//! template.
//!
//! `initdb` and `postgres` refuse to run as root: when the tests run as root, both run as the
//! `postgres` user (initdb through `CommandExt::uid/gid`, the server through `setpriv`, which
//! execs it, so the pid the fault hooks signal is the postmaster itself), in directories owned
//! by that user. The postmaster's children (one backend per connection) put themselves in
//! sessions of their own, so `pause`, `resume` and `kill` signal them too, found through
//! `/proc`.

use super::port_accepts;
use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill as send_signal};
use nix::unistd::Pid;

use super::{
    ManagedProcess, Probe, ServerError, Spec, canonical, free_port, make_temp_dir, process_lifetime_dir,
    run_command, running_as_root,
};

mod psql;

pub(crate) use psql::psql;
use psql::psql_command;

/// The database created in every instance, owned by [`USER`].
pub const DATABASE: &str = "locktest";
/// The login role created in every instance: no superuser, owner of [`DATABASE`].
pub const USER: &str = "lock";
/// The password of [`USER`].
pub const PASSWORD: &str = "lockpw";
/// The superuser's password (`postgres`), for the tests' administrator connections.
pub const ADMIN_PASSWORD: &str = "adminpw";
/// The Debian package providing the binaries.
const PACKAGE: &str = "postgresql";

/// The newest `/usr/lib/postgresql/<major>/bin` holding `postgres`, `initdb` and `psql`.
pub(crate) fn bin_dir() -> Result<PathBuf, ServerError> {
    let missing = || ServerError::MissingBinary {
        binary: "postgres (/usr/lib/postgresql/*/bin)".into(),
        debian_package: PACKAGE,
    };
    let mut majors: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .map_err(|_| missing())?
        .filter_map(|e| e.ok())
        .filter_map(|e| Some((e.file_name().to_str()?.parse::<u32>().ok()?, e.path().join("bin"))))
        .filter(|(_, bin)| ["postgres", "initdb", "psql"].iter().all(|b| bin.join(b).is_file()))
        .collect();
    majors.sort();
    majors.pop().map(|(_, bin)| bin).ok_or_else(missing)
}

/// uid and gid of the `postgres` user, from `/etc/passwd`.
fn postgres_ids() -> Result<(u32, u32), ServerError> {
    let passwd =
        std::fs::read_to_string("/etc/passwd").map_err(|e| ServerError::io("reading /etc/passwd", e))?;
    passwd
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.len() > 3 && f[0] == "postgres").then(|| Some((f[2].parse().ok()?, f[3].parse().ok()?)))?
        })
        .ok_or(ServerError::MissingBinary { binary: "the postgres user".into(), debian_package: PACKAGE })
}

/// Who runs initdb and the server: the `postgres` user when we are root, else ourselves.
pub(crate) fn server_user() -> Result<Option<(u32, u32)>, ServerError> {
    if running_as_root() { postgres_ids().map(Some) } else { Ok(None) }
}

pub(crate) fn chown(path: &Path, user: Option<(u32, u32)>) -> Result<(), ServerError> {
    match user {
        Some((uid, gid)) => std::os::unix::fs::chown(path, Some(uid), Some(gid))
            .map_err(|e| ServerError::io(format!("chown {}", path.display()), e)),
        None => Ok(()),
    }
}

#[derive(Debug)]
struct Template {
    data: PathBuf,
    // Removes the template directory when the process ends; never dropped (lives in a static).
    _reaper: Mutex<Child>,
}

static TEMPLATE: OnceLock<Result<Template, ServerError>> = OnceLock::new();

/// The pristine data directory, made by `initdb` once per process (~1 s).
fn template() -> Result<&'static Path, ServerError> {
    TEMPLATE
        .get_or_init(|| {
            let bin = bin_dir()?;
            let user = server_user()?;
            let (root, reaper) = process_lifetime_dir("pgtpl")?;
            chown(&root, user)?;
            let pwfile = root.join("pw");
            std::fs::write(&pwfile, ADMIN_PASSWORD)
                .map_err(|e| ServerError::io("writing the password file", e))?;
            chown(&pwfile, user)?;
            let data = root.join("data");
            let mut cmd = Command::new(bin.join("initdb"));
            if let Some((uid, gid)) = user {
                cmd.uid(uid).gid(gid);
            }
            let mut pw = OsString::from("--pwfile=");
            pw.push(&pwfile);
            run_command(
                "initdb",
                cmd.arg("-D").arg(&data).arg(pw).args([
                    "-U",
                    "postgres",
                    // Passwords over TCP (as in production), trust on the private unix socket.
                    "--auth-host=scram-sha-256",
                    "--auth-local=trust",
                    "--no-sync",
                    "-E",
                    "UTF8",
                    "--locale=C",
                ]),
            )?;
            Ok(Template { data, _reaper: Mutex::new(reaper) })
        })
        .as_ref()
        .map(|t| t.data.as_path())
        .map_err(Clone::clone)
}

/// The program and leading arguments that run `program` as `user` (`None`: as this process):
/// `setpriv` execs it (no fork), so the pid the test holds is the server's.
pub(crate) fn as_user(
    user: Option<(u32, u32)>,
    program: PathBuf,
) -> Result<(PathBuf, Vec<OsString>), ServerError> {
    let Some((uid, gid)) = user else { return Ok((program, Vec::new())) };
    if !Path::new("/usr/bin/setpriv").is_file() {
        return Err(ServerError::MissingBinary { binary: "setpriv".into(), debian_package: "util-linux" });
    }
    let args = vec![
        format!("--reuid={uid}").into(),
        format!("--regid={gid}").into(),
        "--clear-groups".into(),
        "--".into(),
        program.into_os_string(),
    ];
    Ok((PathBuf::from("/usr/bin/setpriv"), args))
}

/// A private PostgreSQL on `127.0.0.1:port()` with database `locktest` owned by the login role
/// `lock`/`lockpw`, and the superuser `postgres`/[`ADMIN_PASSWORD`].
///
/// The data directory is a `cp -a` of a template made once per process (`initdb`), under
/// `/dev/shm` when available; `fsync=off` (a killed server keeps what it committed: the
/// WAL reaches the kernel at commit; the machine's crash is not tested), or initdb's defaults
/// on disk for [`Durability::Packaged`](lock_testkit::server::Durability). Dropping it kills the server and its backends and removes
/// its directory.
#[derive(Debug)]
pub struct PgServer {
    proc: ManagedProcess,
    bin: PathBuf,
    data_dir: PathBuf,
}

impl PgServer {
    /// Starts a server with the default settings.
    pub fn start() -> Result<Self, ServerError> {
        Self::start_with(&[])
    }

    /// Starts a server with extra `-c name=value` settings appended (later ones win), e.g.
    /// `["max_connections=20"]`.
    pub fn start_with(settings: &[&str]) -> Result<Self, ServerError> {
        let bin = bin_dir()?;
        let user = server_user()?;
        let template = template()?;
        super::with_port_retries(|| {
            let port = free_port()?;
            let dir = make_temp_dir("pg")?;
            let base = canonical(dir.path());
            chown(&base, user)?;
            let data_dir = base.join("data");
            run_command(
                "cp -a <template data dir>",
                Command::new("cp").arg("-a").arg(template).arg(&data_dir),
            )?;

            let (program, mut args) = as_user(user, bin.join("postgres"))?;
            args.push("-D".into());
            args.push(data_dir.clone().into());
            args.push("-p".into());
            args.push(port.to_string().into());
            let mut setting = |s: &str| {
                args.push("-c".into());
                args.push(s.into());
            };
            setting("listen_addresses=127.0.0.1");
            setting(&format!("unix_socket_directories={}", base.display()));
            setting("logging_collector=off");
            if !lock_testkit::server::durable() {
                setting("max_connections=400");
                setting("shared_buffers=16MB");
                setting("fsync=off");
                setting("full_page_writes=off");
            }
            for s in settings {
                setting(s);
            }
            let spec = Spec::new(
                format!("postgres on 127.0.0.1:{port}"),
                program,
                args,
                (port, Vec::new()),
                probe(bin.clone(), data_dir.display().to_string()),
                Duration::from_secs(30),
            );
            let proc = ManagedProcess::start(spec, dir)?;
            psql(
                &bin,
                port,
                "postgres",
                &[
                    &format!("CREATE ROLE {USER} LOGIN PASSWORD '{PASSWORD}'"),
                    &format!("CREATE DATABASE {DATABASE} OWNER {USER}"),
                ],
            )?;
            Ok(PgServer { proc, bin: bin.clone(), data_dir })
        })
    }

    /// The client port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.proc.port()
    }

    /// `postgres://lock:lockpw@127.0.0.1:PORT/locktest`.
    pub fn url(&self) -> String {
        format!("postgres://{USER}:{PASSWORD}@127.0.0.1:{}/{DATABASE}", self.port())
    }

    /// `postgres://postgres:<ADMIN_PASSWORD>@127.0.0.1:PORT/locktest` (the superuser).
    pub fn admin_url(&self) -> String {
        format!("postgres://postgres:{ADMIN_PASSWORD}@127.0.0.1:{}/{DATABASE}", self.port())
    }

    /// The server's data directory.
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// Runs SQL statements as the superuser in `locktest` through `psql` (blocking), one
    /// transaction each; returns the rows, `|`-separated.
    pub fn exec_as_admin(&self, statements: &[&str]) -> Result<String, ServerError> {
        psql(&self.bin, self.port(), DATABASE, statements)
    }

    /// Starts `psql` as the superuser on `statements` and returns at once: a transaction held
    /// open across a fault (`BEGIN; ... FOR UPDATE; SELECT pg_sleep(..); COMMIT`); wait for the
    /// child to know it ended.
    pub fn spawn_as_admin(&self, statements: &[&str]) -> Result<Child, ServerError> {
        psql_command(&self.bin, self.port(), DATABASE, statements)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| ServerError::io("starting psql", e))
    }

    /// The postmaster's children (backends and helpers), by `/proc`.
    fn children(&self) -> Vec<i32> {
        let parent = self.proc.pid().to_string();
        let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
        dir.filter_map(|e| e.ok())
            .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
            .filter(|pid| {
                // /proc/<pid>/stat: "pid (comm) state ppid ..."; comm may hold spaces.
                std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
                    s.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(1))
                        == Some(parent.as_str())
                })
            })
            .collect()
    }

    fn signal_children(&self, sig: Signal) -> Vec<i32> {
        let children = if self.proc.is_running() { self.children() } else { Vec::new() };
        for &pid in &children {
            let _ = send_signal(Pid::from_raw(pid), sig);
        }
        children
    }

    /// SIGKILL the server and every backend, and wait until they are gone (a backend left
    /// attached to the shared memory would keep a restarted server from starting).
    pub fn kill(&self) -> Result<(), ServerError> {
        let _ = self.proc.pause(); // no new children while we collect them
        let children = self.signal_children(Signal::SIGKILL);
        let result = self.proc.kill();
        let deadline = Instant::now() + Duration::from_secs(10);
        for pid in children {
            while Path::new(&format!("/proc/{pid}")).exists()
                && !std::fs::read_to_string(format!("/proc/{pid}/status"))
                    .is_ok_and(|s| s.lines().any(|l| l.starts_with("State:") && l.contains('Z')))
                && Instant::now() < deadline
            {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        result
    }

    /// SIGTERM (a smart shutdown: the server waits for its clients) and wait for the exit; a
    /// kill after 10 s.
    pub fn stop(&self) -> Result<(), ServerError> {
        self.signal_children(Signal::SIGCONT);
        let _ = self.proc.stop();
        self.kill()
    }

    /// Start again on the same port with the same data directory; waits until serving.
    pub fn restart(&self) -> Result<(), ServerError> {
        self.kill()?;
        self.proc.restart()
    }

    /// SIGSTOP the postmaster and every backend: requests hang, connections stay open.
    pub fn pause(&self) -> Result<(), ServerError> {
        self.proc.pause()?;
        self.signal_children(Signal::SIGSTOP);
        Ok(())
    }

    /// SIGCONT after [`pause`](Self::pause).
    pub fn resume(&self) -> Result<(), ServerError> {
        self.signal_children(Signal::SIGCONT);
        self.proc.resume()
    }

    /// True while the postmaster exists (also while paused).
    pub fn is_running(&self) -> bool {
        self.proc.is_running()
    }

    /// The postmaster's pid (after a kill: of the last one).
    pub fn pid(&self) -> u32 {
        self.proc.pid()
    }

    /// The underlying process (directory, log, startup time ...).
    pub fn process(&self) -> &ManagedProcess {
        &self.proc
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        // The backends too: ManagedProcess only kills the postmaster.
        let _ = self.kill();
    }
}

impl lock_testkit::server::FaultControl for PgServer {
    fn process(&self) -> &ManagedProcess {
        &self.proc
    }
    fn kill(&self) -> Result<(), ServerError> {
        PgServer::kill(self)
    }
    fn stop(&self) -> Result<(), ServerError> {
        PgServer::stop(self)
    }
    fn restart(&self) -> Result<(), ServerError> {
        PgServer::restart(self)
    }
    fn pause(&self) -> Result<(), ServerError> {
        PgServer::pause(self)
    }
    fn resume(&self) -> Result<(), ServerError> {
        PgServer::resume(self)
    }
}

/// `psql -c 'SHOW data_directory'` (as the superuser, over TCP) prints `data_dir`.
fn probe(bin: PathBuf, data_dir: String) -> Probe {
    Probe::new(Duration::from_millis(10), move |_pid, port| {
        if !port_accepts(port) {
            return Err("port not accepting connections".into());
        }
        let got = psql(&bin, port, "postgres", &["SHOW data_directory"]).map_err(|e| e.to_string())?;
        if got.trim() == data_dir {
            Ok(())
        } else {
            Err(format!("SHOW data_directory returned {:?}, expected {data_dir:?}", got.trim()))
        }
    })
}
