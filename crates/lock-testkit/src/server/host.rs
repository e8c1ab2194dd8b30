//! What the machine provides to the servers: free loopback ports, installed binaries, private
//! directories, helper commands.

use std::collections::BTreeSet;
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener, TcpStream};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use lock_core::backend::Mutex;

use super::ServerError;

static HANDED_OUT_PORTS: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());

/// A free TCP port on 127.0.0.1, never handed out before by this process.
///
/// Ports are taken *below* the kernel's ephemeral range (`ip_local_port_range`, normally from
/// 32768), so an outgoing client connection can never pick a killed server's port as its source
/// port before the server is restarted on it; 26000-26999 is skipped (used by the fixed-port
/// service scripts). A port counts as free if `127.0.0.1:port` can be bound; it is released again,
/// so another process may still grab it before our server binds it: the `start` functions retry
/// with a new port when a server exits during startup. Falls back to binding `127.0.0.1:0`.
pub fn free_port() -> Result<u16, ServerError> {
    let mut taken = HANDED_OUT_PORTS.lock();
    let (low, high) = (20_000u32, ephemeral_low().clamp(20_000, 65_535));
    if high > low + 2_000 {
        let span = high - low;
        // spread processes over the range: concurrent test binaries rarely probe the same ports
        let seed = std::process::id().wrapping_mul(2_654_435_761)
            ^ std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.subsec_nanos())
                .unwrap_or(0);
        for i in 0..span {
            let Ok(port) = u16::try_from(low + (seed.wrapping_add(i) % span)) else { continue };
            if (26_000..27_000).contains(&port) || taken.contains(&port) {
                continue;
            }
            if TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok() {
                taken.insert(port);
                return Ok(port);
            }
        }
    }
    for _ in 0..256 {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .map_err(|e| ServerError::io("binding 127.0.0.1:0 to find a free port", e))?;
        let port = listener
            .local_addr()
            .map_err(|e| ServerError::io("reading the local address of a probe socket", e))?
            .port();
        drop(listener);
        if taken.insert(port) {
            return Ok(port);
        }
    }
    Err(ServerError::io(
        "finding a free port",
        io::Error::new(io::ErrorKind::AddrInUse, "no unused port after 256 tries"),
    ))
}

/// The first port of the kernel's ephemeral (auto-bind) range; 32768 if unknown.
fn ephemeral_low() -> u32 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse().ok()))
        .unwrap_or(32_768)
}

/// `127.0.0.1:port`.
pub fn loopback(port: u16) -> SocketAddr {
    SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, port))
}

/// Finds `name` in `PATH` (and the sbin directories, which a non-root `PATH` often lacks).
pub fn find_binary(name: &str, debian_package: &'static str) -> Result<PathBuf, ServerError> {
    let missing = || ServerError::MissingBinary { binary: name.to_string(), debian_package };
    if name.contains('/') {
        return if is_executable(Path::new(name)) { Ok(PathBuf::from(name)) } else { Err(missing()) };
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    let extra = ["/usr/local/sbin", "/usr/sbin", "/sbin", "/usr/local/bin", "/usr/bin", "/bin"];
    std::env::split_paths(&path)
        .chain(extra.iter().map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
        .ok_or_else(missing)
}

/// True if `binary` is found where [`find_binary`] looks for it (`PATH` plus the sbin
/// directories), as the servers do.
pub fn is_installed(binary: &str) -> bool {
    find_binary(binary, "").is_ok()
}

fn is_executable(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Checks that a data file (a jar) exists.
pub fn require_file(path: &str, debian_package: &'static str) -> Result<PathBuf, ServerError> {
    let p = PathBuf::from(path);
    if p.is_file() {
        Ok(p)
    } else {
        Err(ServerError::MissingBinary { binary: path.to_string(), debian_package })
    }
}

/// The base directory for server files: a disk directory for servers run as packaged
/// ([`super::disk_base`]); else `/dev/shm` when it exists (tmpfs: fast, and short paths for
/// unix sockets), else the system temp dir.
pub(crate) fn temp_base() -> PathBuf {
    if super::durable() {
        return super::disk_base();
    }
    let shm = Path::new("/dev/shm");
    let writable = shm.is_dir()
        && std::fs::metadata(shm)
            .is_ok_and(|m| !m.permissions().readonly() && m.permissions().mode() & 0o002 != 0);
    if writable { shm.to_path_buf() } else { std::env::temp_dir() }
}

/// A fresh private directory `BASE/lktk-<kind>-XXXXXX`, canonicalised.
pub fn make_temp_dir(kind: &str) -> Result<tempfile::TempDir, ServerError> {
    tempfile::Builder::new()
        .prefix(&format!("lktk-{kind}-"))
        .tempdir_in(temp_base())
        .map_err(|e| ServerError::io(format!("creating a temp dir for {kind}"), e))
}

/// True when this process runs as root (some servers refuse to, or need telling).
pub fn running_as_root() -> bool {
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// `path` with its links resolved (itself when that fails): what a server reports of its own
/// directories.
pub fn canonical(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}

/// The last `max_bytes` of a file, lossily decoded (empty string if unreadable).
pub(crate) fn file_tail(path: &Path, max_bytes: u64) -> String {
    let Ok(mut f) = File::open(path) else { return String::new() };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = f.seek(SeekFrom::Start(len.saturating_sub(max_bytes)));
    let mut buf = Vec::new();
    let _ = f.read_to_end(&mut buf);
    String::from_utf8_lossy(&buf).into_owned()
}

/// Runs a helper command to completion; non-zero exit becomes [`ServerError::Command`].
pub fn run_command(what: &str, cmd: &mut Command) -> Result<String, ServerError> {
    let out = cmd.stdin(Stdio::null()).output().map_err(|e| ServerError::io(format!("running {what}"), e))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(ServerError::Command {
            what: what.to_string(),
            detail: format!(
                "{}; stdout: {}; stderr: {}",
                out.status,
                String::from_utf8_lossy(&out.stdout).trim(),
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        })
    }
}

/// True if a TCP connection to `127.0.0.1:port` is accepted right now.
pub fn port_accepts(port: u16) -> bool {
    TcpStream::connect_timeout(&loopback(port), Duration::from_millis(250)).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_binary_names_the_package() {
        let err =
            find_binary("lktk-definitely-not-installed", "some-debian-pkg").expect_err("must be missing");
        assert!(err.is_missing_binary());
        let msg = err.to_string();
        assert!(msg.contains("lktk-definitely-not-installed"), "{msg}");
        assert!(msg.contains("apt-get install some-debian-pkg"), "{msg}");
    }

    #[test]
    fn free_ports_are_unique() {
        let ports: Vec<u16> = (0..50).map(|_| free_port().expect("free port")).collect();
        let set: BTreeSet<u16> = ports.iter().copied().collect();
        assert_eq!(set.len(), ports.len());
    }
}
