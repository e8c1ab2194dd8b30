//! No orphans: a tiny `/bin/sh` next to every server (and every temporary directory) whose
//! stdin is a pipe held only by the test process. When the test process ends in any way (panic,
//! `exit`, SIGKILL), the kernel closes the pipe, the script reads EOF, SIGKILLs the server and
//! removes its directory.

use std::ffi::{OsStr, OsString};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use super::ServerError;
use super::host::{canonical, make_temp_dir};

/// Runs `script` under `/bin/sh` with `args` and a stdin pipe held only by this process: the
/// script's `read _eof` returns when this process ends in any way, even by SIGKILL. Own process
/// group: a Ctrl-C to the test's group must not kill it before the test's own cleanup ran.
fn spawn_on_exit(script: &str, name: &str, args: &[&OsStr], what: &str) -> Result<Child, ServerError> {
    Command::new("/bin/sh")
        .arg("-c")
        .arg(script)
        .arg(name)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .map_err(|e| ServerError::io(format!("spawning the {what} (/bin/sh)"), e))
}

/// A program that removes `dir` when this process ends.
/// The returned child must be kept alive (never dropped) for as long as `dir` should live.
pub(crate) fn spawn_exit_reaper(dir: &Path) -> Result<Child, ServerError> {
    spawn_on_exit(r#"read _eof; rm -rf "$1""#, "lktk-reaper", &[dir.as_os_str()], "temp-dir reaper")
}

/// A fresh directory (`make_temp_dir(kind)`, canonicalised) that lasts until this process ends
/// in any way, for a per-process template: removed by the returned reaper, which must be kept
/// (never dropped) for as long as the directory should live.
pub fn process_lifetime_dir(kind: &str) -> Result<(PathBuf, Child), ServerError> {
    let dir = make_temp_dir(kind)?.keep();
    match spawn_exit_reaper(&dir) {
        Ok(reaper) => Ok((canonical(&dir), reaper)),
        Err(e) => {
            let _ = std::fs::remove_dir_all(&dir);
            Err(e)
        }
    }
}

/// Waits for the server with `pid` to die (or become a zombie) after the SIGKILL, at most 5 s,
/// then removes the directory.
const WATCHDOG_SCRIPT: &str = r#"read _eof
kill -9 "$1" 2>/dev/null
i=0
while [ "$i" -lt 100 ] && [ -d "/proc/$1" ] && ! grep -qs '^State:[[:space:]]*Z' "/proc/$1/status"; do
  sleep 0.05; i=$((i+1))
done
rm -rf "$2""#;

pub(super) fn spawn_watchdog(server_pid: u32, dir: &Path) -> Result<Child, ServerError> {
    let pid = OsString::from(server_pid.to_string());
    spawn_on_exit(WATCHDOG_SCRIPT, "lktk-watchdog", &[&pid, dir.as_os_str()], "watchdog")
}

pub(super) fn kill_and_reap(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}
