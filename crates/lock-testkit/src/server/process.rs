//! Process management: spawning a server in its own process group next to a watchdog, and the
//! one implementation of kill, stop, restart, SIGSTOP pause and resume.

use std::ffi::OsString;
use std::fs::OpenOptions;
use std::io;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use lock_core::backend::Mutex;
use nix::sys::signal::{Signal, kill as send_signal};
use nix::unistd::Pid;

use super::ServerError;
use super::host::{file_tail, port_accepts};
use super::probe::Probe;
use super::watchdog::{kill_and_reap, spawn_watchdog};

/// What is needed to (re)spawn a server process, made by [`Spec::new`].
#[derive(Debug)]
pub struct Spec {
    /// Human-readable name used in errors ("redis-server on 127.0.0.1:PORT").
    pub(crate) what: String,
    pub(crate) program: PathBuf,
    pub(crate) args: Vec<OsString>,
    /// The client port (readiness and kill checks).
    pub(crate) port: u16,
    /// Other ports the process listens on (checked closed after a kill).
    pub(crate) other_ports: Vec<u16>,
    pub(crate) probe: Probe,
    pub(crate) ready_timeout: Duration,
}

impl Spec {
    /// `program args` named `what` in errors, serving on `port` (and listening on
    /// `other_ports`, checked closed after a kill), ready once `probe` passes, within
    /// `ready_timeout`.
    pub fn new(
        what: impl Into<String>,
        program: PathBuf,
        args: Vec<OsString>,
        (port, other_ports): (u16, Vec<u16>),
        probe: Probe,
        ready_timeout: Duration,
    ) -> Spec {
        Spec { what: what.into(), program, args, port, other_ports, probe, ready_timeout }
    }
}

#[derive(Debug, Default)]
struct ProcState {
    child: Option<Child>,
    watchdog: Option<Child>,
    last_pid: u32,
    paused: bool,
    last_ready_after: Option<Duration>,
}

/// One server process owned by the test: spawns it (and its watchdog), proves readiness, and
/// implements the fault hooks. Every server type and ensemble node wraps one.
///
/// All methods take `&self` (the state sits behind a mutex), so servers kept in a `static` or
/// borrowed from an ensemble can be faulted too.
#[derive(Debug)]
pub struct ManagedProcess {
    spec: Spec,
    log_path: PathBuf,
    state: Mutex<ProcState>,
    // Dropped after `Drop::drop` killed the process.
    dir: tempfile::TempDir,
}

impl ManagedProcess {
    /// Spawns the process (not yet waiting for readiness).
    pub fn spawn_new(spec: Spec, dir: tempfile::TempDir) -> Result<Self, ServerError> {
        let log_path = dir.path().join("server.log");
        let me = ManagedProcess { spec, log_path, state: Mutex::new(ProcState::default()), dir };
        me.spawn()?;
        Ok(me)
    }

    /// Spawns `spec` in `dir` (its working directory, holding its log and removed when it
    /// is dropped), next to its watchdog, and waits until ready; kills the process if it does
    /// not get ready.
    ///
    /// # Errors
    /// The spawn's, or [`ServerError::Exited`] / [`ServerError::NotReady`] with the log's tail.
    pub fn start(spec: Spec, dir: tempfile::TempDir) -> Result<Self, ServerError> {
        let me = Self::spawn_new(spec, dir)?;
        me.wait_ready()?;
        Ok(me)
    }

    fn spawn(&self) -> Result<(), ServerError> {
        let mut st = self.state.lock();
        if let Some(child) = st.child.as_mut()
            && child.try_wait().ok().flatten().is_none()
        {
            return Ok(()); // already running
        }
        Self::reap(&mut st);
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log_path)
            .map_err(|e| ServerError::io(format!("opening {}", self.log_path.display()), e))?;
        let log2 = log.try_clone().map_err(|e| ServerError::io("duplicating the log file handle", e))?;
        let mut child = Command::new(&self.spec.program)
            .args(&self.spec.args)
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            .process_group(0)
            .spawn()
            .map_err(|e| ServerError::io(format!("spawning {}", self.spec.program.display()), e))?;
        let watchdog = match spawn_watchdog(child.id(), self.dir.path()) {
            Ok(w) => w,
            Err(e) => {
                kill_and_reap(&mut child);
                return Err(e);
            }
        };
        st.last_pid = child.id();
        st.child = Some(child);
        st.watchdog = Some(watchdog);
        st.paused = false;
        Ok(())
    }

    /// Reaps a dead child and its watchdog (the state holds no live process afterwards).
    fn reap(st: &mut ProcState) {
        if let Some(mut child) = st.child.take() {
            kill_and_reap(&mut child);
        }
        if let Some(mut w) = st.watchdog.take() {
            kill_and_reap(&mut w);
        }
        st.paused = false;
    }

    /// Exit status if the child has exited (and then also retires its watchdog).
    fn exited(&self) -> Option<ExitStatus> {
        let mut st = self.state.lock();
        let status = st.child.as_mut().and_then(|c| c.try_wait().ok().flatten());
        if status.is_some() {
            // The pid is free now: retire the watchdog before it could ever target a reused pid.
            if let Some(mut w) = st.watchdog.take() {
                kill_and_reap(&mut w);
            }
        }
        status
    }

    /// Polls the readiness probe until it passes, the process exits, or the timeout elapses.
    /// On failure the process is killed.
    pub fn wait_ready(&self) -> Result<(), ServerError> {
        let started = Instant::now();
        let deadline = started + self.spec.ready_timeout;
        let pid = self.pid();
        loop {
            if let Some(status) = self.exited() {
                self.kill_quietly();
                return Err(ServerError::Exited {
                    what: self.spec.what.clone(),
                    status: status.to_string(),
                    log_tail: self.log_tail(),
                });
            }
            let last = match self.spec.probe.check(pid, self.spec.port) {
                Ok(()) => {
                    self.state.lock().last_ready_after = Some(started.elapsed());
                    return Ok(());
                }
                Err(observation) => observation,
            };
            if Instant::now() >= deadline {
                let log_tail = self.log_tail();
                self.kill_quietly();
                return Err(ServerError::NotReady {
                    what: format!("{} (last probe: {last})", self.spec.what),
                    waited: started.elapsed(),
                    log_tail,
                });
            }
            thread::sleep(self.spec.probe.poll_interval());
        }
    }

    fn kill_quietly(&self) {
        let mut st = self.state.lock();
        Self::reap(&mut st);
    }

    /// Polls until every port of the process refuses connections (at most 10 s).
    fn wait_ports_closed(&self) -> Result<(), ServerError> {
        let started = Instant::now();
        for &port in std::iter::once(&self.spec.port).chain(&self.spec.other_ports) {
            while port_accepts(port) {
                if started.elapsed() > Duration::from_secs(10) {
                    return Err(ServerError::PortStillOpen { port, waited: started.elapsed() });
                }
                thread::sleep(Duration::from_millis(5));
            }
        }
        Ok(())
    }

    fn signal(&self, sig: Signal) -> Result<(), ServerError> {
        let mut st = self.state.lock();
        // never signal a pid we already reaped (it could have been reused)
        let pid = match st.child.as_mut() {
            Some(c) => match c.try_wait() {
                Ok(None) => c.id(),
                _ => return Err(ServerError::NotRunning { what: self.spec.what.clone() }),
            },
            None => return Err(ServerError::NotRunning { what: self.spec.what.clone() }),
        };
        let raw = i32::try_from(pid).map_err(|_| ServerError::NotRunning { what: self.spec.what.clone() })?;
        send_signal(Pid::from_raw(raw), sig)
            .map_err(|e| ServerError::io(format!("sending {sig} to {}", self.spec.what), io::Error::from(e)))
    }

    // ----- public fault hooks -----

    /// SIGKILL, reap the process, retire its watchdog and wait until its ports are closed.
    /// A no-op (except the port check) if it is not running.
    pub fn kill(&self) -> Result<(), ServerError> {
        {
            let mut st = self.state.lock();
            if let Some(mut child) = st.child.take() {
                let _ = child.kill(); // SIGKILL; also works on a SIGSTOPped process
                // Retire the watchdog *before* reaping, while the pid cannot be reused.
                if let Some(mut w) = st.watchdog.take() {
                    kill_and_reap(&mut w);
                }
                let _ = child.wait();
            }
            Self::reap(&mut st);
        }
        self.wait_ports_closed()
    }

    /// SIGTERM (a clean shutdown) and wait for the exit; SIGKILL after 10 s.
    pub fn stop(&self) -> Result<(), ServerError> {
        if self.is_running() {
            self.signal(Signal::SIGTERM)?;
            if self.is_paused() {
                // a stopped process only acts on SIGTERM once continued
                let _ = self.signal(Signal::SIGCONT);
            }
            let deadline = Instant::now() + Duration::from_secs(10);
            while self.exited().is_none() && Instant::now() < deadline {
                thread::sleep(Duration::from_millis(5));
            }
        }
        self.kill()
    }

    /// Starts the process again with the same command line, port and directory (so the data
    /// survives), and waits until it truly serves. If it is still running it is killed first.
    pub fn restart(&self) -> Result<(), ServerError> {
        self.kill()?;
        self.spawn()?;
        self.wait_ready()
    }

    /// Starts the process again (like [`restart`](Self::restart)) without waiting for readiness.
    pub fn respawn(&self) -> Result<(), ServerError> {
        self.kill()?;
        self.spawn()
    }

    /// SIGSTOP: the process freezes; connections stay open but nothing is answered.
    pub fn pause(&self) -> Result<(), ServerError> {
        self.signal(Signal::SIGSTOP)?;
        self.state.lock().paused = true;
        // SIGSTOP returns before every thread has stopped: under load a request sent right
        // after could still be served by a thread that had not yet (a release a paused MariaDB
        // "answered" in CI). Return once the kernel shows every thread stopped.
        wait_stopped(self.pid(), STOP_BOUND);
        Ok(())
    }

    /// SIGCONT after [`pause`](Self::pause).
    pub fn resume(&self) -> Result<(), ServerError> {
        self.signal(Signal::SIGCONT)?;
        self.state.lock().paused = false;
        Ok(())
    }

    /// True while the process exists (also while paused).
    pub fn is_running(&self) -> bool {
        let running = {
            let mut st = self.state.lock();
            st.child.as_mut().is_some_and(|c| c.try_wait().ok().flatten().is_none())
        };
        if !running {
            // retire the watchdog of a process that died by itself
            let _ = self.exited();
        }
        running
    }

    /// True between [`pause`](Self::pause) and [`resume`](Self::resume) (or a kill/restart).
    pub fn is_paused(&self) -> bool {
        self.state.lock().paused
    }

    /// The pid of the current process (after a kill: of the last one).
    pub fn pid(&self) -> u32 {
        self.state.lock().last_pid
    }

    /// The client port.
    pub fn port(&self) -> u16 {
        self.spec.port
    }

    /// The private directory holding the server's data, config and log.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The server's log file (its stdout and stderr).
    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// The last 4 KiB of the log.
    pub fn log_tail(&self) -> String {
        file_tail(&self.log_path, 4096)
    }

    /// How long the last (re)start took from spawn to passing the readiness probe.
    pub fn last_ready_after(&self) -> Option<Duration> {
        self.state.lock().last_ready_after
    }
}

impl Drop for ManagedProcess {
    fn drop(&mut self) {
        let mut st = self.state.lock();
        if let Some(mut child) = st.child.take() {
            let _ = child.kill();
            if let Some(mut w) = st.watchdog.take() {
                kill_and_reap(&mut w);
            }
            let _ = child.wait();
        }
        Self::reap(&mut st);
        // `dir` (TempDir) is removed when the fields drop, after this.
    }
}

/// Runs `attempt` up to 3 times while the server exits during startup (typically: the port we
/// picked was grabbed by someone else in between). Other errors are returned at once.
pub fn with_port_retries<T>(mut attempt: impl FnMut() -> Result<T, ServerError>) -> Result<T, ServerError> {
    let mut tries = 0;
    loop {
        tries += 1;
        match attempt() {
            Err(ServerError::Exited { .. }) if tries < 3 => continue,
            other => return other,
        }
    }
}

/// How long [`ManagedProcess::pause`] waits for every thread to show as stopped.
const STOP_BOUND: Duration = Duration::from_secs(2);

/// Wait (polling `/proc`, bounded by `bound`) until every thread of `pid` is stopped (state
/// `T`); a thread that exits meanwhile is gone from the list. Off Linux there is no `/proc`:
/// returns at once.
fn wait_stopped(pid: u32, bound: Duration) {
    let tasks = PathBuf::from(format!("/proc/{pid}/task"));
    let until = Instant::now() + bound;
    while Instant::now() < until {
        let Ok(dir) = std::fs::read_dir(&tasks) else { return };
        let stopped = dir.flatten().all(|t| {
            std::fs::read_to_string(t.path().join("stat"))
                .ok()
                .and_then(|stat| stat.rsplit_once(')').and_then(|(_, rest)| rest.trim_start().chars().next()))
                .is_none_or(|state| state == 'T' || state == 't')
        });
        if stopped {
            return;
        }
        thread::sleep(Duration::from_millis(1));
    }
}
