//! A TLS-only standalone ZooKeeper: `secureClientPort` through Netty, no plaintext client port.
//!
//! ZooKeeper 3.8 reads PEM key and trust stores (`ssl.keyStore.type=PEM`); the key store is the
//! certificate chain followed by the PKCS#8 key in one file. Four-letter words are answered on
//! the secure port too (`zkServer.sh status` asks them there), so readiness and
//! [`ZkServer::four_letter`] speak TLS to it, through `openssl s_client` trusting the CA.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;

use super::{ServerError, TlsFiles, ZkServer, find_binary};

/// The Netty jars `zookeeper.jar`'s manifest leaves out (the codec, for the TLS handler).
pub(super) const NETTY_CLASS_PATH: &str = ":/usr/share/java/netty-codec.jar:/usr/share/java/netty-resolver.jar:\
     /usr/share/java/netty-transport-native-unix-common.jar";

/// TLS-only ports of live servers, with their CA: the readiness probe only knows a port.
static TLS_PORTS: Mutex<BTreeMap<u16, PathBuf>> = Mutex::new(BTreeMap::new());

fn ports() -> std::sync::MutexGuard<'static, BTreeMap<u16, PathBuf>> {
    TLS_PORTS.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The CA of a TLS-only server on `port`, if there is one.
pub(super) fn ca_of(port: u16) -> Option<PathBuf> {
    ports().get(&port).cloned()
}

/// A port known as TLS-only until dropped.
#[derive(Debug)]
pub(super) struct Registered(u16);

impl Registered {
    pub(super) fn new(port: u16, ca: &Path) -> Self {
        ports().insert(port, ca.to_path_buf());
        Registered(port)
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        ports().remove(&self.0);
    }
}

/// Turns the plaintext client port of `lines` into the secure one, and returns the JVM flags
/// that serve it with `files` (the key store is written into `dir`).
pub(super) fn serve_tls_only(
    files: &TlsFiles,
    dir: &Path,
    lines: &mut [String],
) -> Result<Vec<OsString>, ServerError> {
    for l in lines.iter_mut() {
        if let Some(rest) = l.strip_prefix("clientPort") {
            *l = format!("secureClientPort{rest}");
        }
    }
    let read = |p: &Path| {
        std::fs::read_to_string(p).map_err(|e| ServerError::io(format!("reading {}", p.display()), e))
    };
    let store = dir.join("keystore.pem");
    let body = format!("{}\n{}", read(&files.cert)?, read(&files.key)?);
    std::fs::write(&store, body).map_err(|e| ServerError::io("writing the ZooKeeper key store", e))?;
    let prop = |k: &str, v: &Path| OsString::from(format!("-Dzookeeper.{k}={}", v.display()));
    Ok(vec![
        "-Dzookeeper.serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory".into(),
        prop("ssl.keyStore.location", &store),
        "-Dzookeeper.ssl.keyStore.type=PEM".into(),
        prop("ssl.trustStore.location", &files.ca),
        "-Dzookeeper.ssl.trustStore.type=PEM".into(),
        // clients present no certificate (as in the other stores' TLS tests)
        "-Dzookeeper.ssl.clientAuth=none".into(),
    ])
}

/// A four-letter word over TLS, verifying the server against `ca`.
pub(super) fn four_letter_word(port: u16, ca: &Path, cmd: &str) -> Result<String, ServerError> {
    let openssl = find_binary("openssl", "openssl")?;
    let ctx = |e| ServerError::io(format!("four-letter word {cmd:?} over TLS to 127.0.0.1:{port}"), e);
    let mut child = Command::new("timeout")
        .arg("3")
        .arg(openssl)
        .args(["s_client", "-quiet", "-verify_return_error", "-connect"])
        .arg(format!("127.0.0.1:{port}"))
        .arg("-CAfile")
        .arg(ca)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(ctx)?;
    // `-quiet` waits for the server to close after its answer, not for the end of our input.
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(cmd.as_bytes()).map_err(ctx)?;
    }
    let out = child.wait_with_output().map_err(ctx)?;
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

impl ZkServer {
    /// Starts a server that serves clients over TLS only (`secureClientPort` on
    /// [`port`](Self::port), no plaintext port), with `tls`'s certificate and PKCS#8 key; clients
    /// need not present a certificate. `cfg_lines` as for [`start_with`](Self::start_with).
    /// Needs `openssl` (readiness asks `srvr` over TLS).
    pub fn start_tls(tls: &TlsFiles, cfg_lines: &[&str]) -> Result<Self, ServerError> {
        Self::start_inner(cfg_lines, Some(tls))
    }

    /// True for a [`start_tls`](Self::start_tls) server.
    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }
}
