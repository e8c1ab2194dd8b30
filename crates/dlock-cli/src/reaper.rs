//! The command's background processes: what keeps the lock held after the command itself has
//! exited, as flock(1) keeps its lock while any process still holds the descriptor.
//!
//! The supervisor makes itself the *child subreaper* of everything the command starts
//! (Linux's `PR_SET_CHILD_SUBREAPER`): a process whose parent exits is re-parented to the
//! supervisor instead of to init, even if it left the command's process group or session
//! (`setsid`, a daemon's double fork). So once the command has exited, "no child left" means
//! "no descendant left", and `waitpid(-1)` both tells it and reaps them. Elsewhere the
//! supervisor cannot follow them: the lock is released when the command exits.

use nix::errno::Errno;
use nix::sys::signal::{Signal, kill};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::{Pid, getpgid, getpgrp};

/// Become the subreaper of every later descendant; `false` where the system cannot.
pub fn adopt_descendants() -> bool {
    #[cfg(target_os = "linux")]
    {
        nix::sys::prctl::set_child_subreaper(true).is_ok()
    }
    #[cfg(not(target_os = "linux"))]
    {
        false
    }
}

/// Reap every descendant that has exited; `true` once none is left, alive or not. Called only
/// after the command itself was waited for: before, it could reap the command behind the
/// runtime's back.
pub fn reap_exited() -> bool {
    loop {
        match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) => return false,
            Ok(_) => continue,
            Err(Errno::EINTR) => continue,
            // ECHILD: no child at all. Any other error means waiting is impossible, and a
            // supervisor that cannot wait must not hold the lock forever.
            Err(_) => return true,
        }
    }
}

/// Send `sig` to the adopted descendants that left the command's process group: the group
/// itself got it from `dlock` already, and these would otherwise keep the lock held while
/// ignoring what the group was told.
pub fn forward_outside_group(sig: Signal) {
    let group = getpgrp();
    for pid in children() {
        if getpgid(Some(pid)).is_ok_and(|g| g != group) {
            let _ = kill(pid, sig);
        }
    }
}

/// The supervisor's children, from `/proc` (empty where it cannot be read). Every thread has
/// its own list: a child belongs to the thread that forked it, or adopted it.
fn children() -> Vec<Pid> {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return Vec::new() };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|text| text.split_whitespace().filter_map(|p| p.parse().ok()).collect::<Vec<i32>>())
        .map(Pid::from_raw)
        .collect()
}
