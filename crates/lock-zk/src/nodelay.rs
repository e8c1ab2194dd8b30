//! Nagle's algorithm off on this process's connections to the ensemble.
//!
//! zookeeper-client (0.11) leaves `TCP_NODELAY` unset on its sockets and has no hook to set it.
//! An acquisition sends its create and the child listing back to back, and several locks of
//! one client share its connection. With Nagle's algorithm on, a request written while an
//! earlier one is unacknowledged waits for that acknowledgement, and the server acknowledges
//! with its answer: the listing waited for the create's answer, so a one-round-trip step took
//! two in about half of the connections (whichever way the client's writes fell). The Java
//! client, Curator's, sets `TCP_NODELAY`.
//!
//! The socket is the client's, so the option is set through a duplicate of each of this
//! process's TCP sockets connected to a server of the connect string (`pidfd_getfd` on our own
//! process: no unsafe code, and the client's descriptor is never touched). After every
//! connect, since the client reconnects to another server by itself. Where the kernel refuses
//! (before Linux 5.6, or a seccomp filter), the connection keeps Nagle's algorithm: slower, not
//! wrong. A client given by the caller is the caller's to tune.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

/// How long setting the option may take (a name lookup that hangs included): it only speeds
/// the connection up, so a connect or a reconnect never waits on it for longer.
const BOUND: Duration = Duration::from_secs(1);

/// Set `TCP_NODELAY` on this process's connections to the servers of `connect`, within
/// [`BOUND`].
pub(crate) async fn apply(connect: &str) {
    let set = async {
        let servers = resolve(connect).await;
        if servers.is_empty() {
            return;
        }
        match tokio::task::spawn_blocking(move || sockets_to(&servers, Set::On)).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "could not set TCP_NODELAY on the zookeeper connection")
            }
            Err(e) => tracing::debug!(error = %e, "setting TCP_NODELAY did not finish"),
        }
    };
    if tokio::time::timeout(BOUND, set).await.is_err() {
        tracing::debug!("setting TCP_NODELAY on the zookeeper connection timed out");
    }
}

/// The addresses of the servers of a connect string (`h1:p1,h2:p2/chroot`); names that do
/// not resolve are left out.
async fn resolve(connect: &str) -> Vec<SocketAddr> {
    let mut out = Vec::new();
    for (host, port) in crate::config::hosts(connect).filter_map(crate::config::split_host) {
        let port = port.and_then(|p| p.parse().ok()).unwrap_or(2181);
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if let Ok(addrs) = tokio::net::lookup_host((host, port)).await {
            out.extend(addrs);
        }
    }
    out
}

/// What to do with each connection found.
#[derive(Clone, Copy)]
pub(crate) enum Set {
    On,
    /// Only count (the test hook).
    #[cfg_attr(not(feature = "testing"), allow(dead_code))]
    Count,
}

/// The connections of this process to `servers`: how many there are, and how many of them
/// had Nagle's algorithm on (before `set`).
#[cfg(target_os = "linux")]
pub(crate) fn sockets_to(servers: &[SocketAddr], set: Set) -> io::Result<(usize, usize)> {
    use rustix::net::sockopt::{set_tcp_nodelay, tcp_nodelay};
    use rustix::process::{PidfdFlags, PidfdGetfdFlags, getpid, pidfd_getfd, pidfd_open};
    let me = pidfd_open(getpid(), PidfdFlags::empty())?;
    let (mut found, mut nagle) = (0, 0);
    for entry in std::fs::read_dir("/proc/self/fd")? {
        let Ok(entry) = entry else { continue };
        let Some(fd) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else { continue };
        if !std::fs::read_link(entry.path())
            .is_ok_and(|l| l.as_os_str().as_encoded_bytes().starts_with(b"socket:"))
        {
            continue;
        }
        // Closed since it was listed, or not ours to duplicate: nothing to set.
        let Ok(dup) = pidfd_getfd(&me, fd, PidfdGetfdFlags::empty()) else { continue };
        let peer = rustix::net::getpeername(&dup).ok().flatten().and_then(|a| SocketAddr::try_from(a).ok());
        if !peer.is_some_and(|p| servers.contains(&p)) {
            continue;
        }
        found += 1;
        if !tcp_nodelay(&dup)? {
            nagle += 1;
            if let Set::On = set {
                set_tcp_nodelay(&dup, true)?;
            }
        }
    }
    Ok((found, nagle))
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn sockets_to(_: &[SocketAddr], _: Set) -> io::Result<(usize, usize)> {
    Ok((0, 0))
}

/// Test hook: this process's connections to the servers of `connect`, and how many of them
/// have Nagle's algorithm on.
#[cfg(feature = "testing")]
pub(crate) async fn count(connect: &str) -> io::Result<(usize, usize)> {
    let servers = resolve(connect).await;
    tokio::task::spawn_blocking(move || sockets_to(&servers, Set::Count)).await.map_err(io::Error::other)?
}
