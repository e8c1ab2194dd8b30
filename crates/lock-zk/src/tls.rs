//! TLS to ZooKeeper (feature `tls`): the client's options, the process's rustls provider, and
//! a diagnosis of a refused handshake.
//!
//! zookeeper-client builds its rustls config with the process-default provider. Its `tls`
//! feature enables rustls's default provider (aws-lc-rs) while the workspace's other stores use
//! ring: with both compiled in, rustls cannot pick one and panics unless a default is installed.
//! So ring is installed before every TLS connection (a no-op if the application installed one).

use std::net::{TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

use lock_core::{LockError, Result};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use zookeeper_client as zk;

use crate::error::NAME;

/// Makes ring the process's rustls provider unless one is installed already.
pub(crate) fn install_provider() {
    lock_core::backend::ensure_tls_provider();
}

/// The client's TLS options: the server's certificate must chain to `ca_pem` and name the host
/// of the connect string.
pub(crate) fn options(ca_pem: &str) -> Result<zk::TlsOptions> {
    install_provider();
    roots(ca_pem)?;
    zk::TlsOptions::new()
        .with_pem_ca(ca_pem)
        .map_err(|e| LockError::InvalidConfig { reason: format!("zookeeper tls ca: {e}") })
}

fn roots(ca_pem: &str) -> Result<rustls::RootCertStore> {
    let invalid = |reason: String| LockError::InvalidConfig { reason };
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        let cert = cert.map_err(|e| invalid(format!("zookeeper tls ca is not PEM: {e}")))?;
        roots.add(cert).map_err(|e| invalid(format!("zookeeper tls ca: {e}")))?;
    }
    if roots.is_empty() {
        return Err(invalid("zookeeper tls ca holds no certificate".to_owned()));
    }
    Ok(roots)
}

/// A handshake that the server answered and refused.
enum Refused {
    /// A TLS alert, a certificate that does not verify, or a reply that is not TLS.
    Tls(rustls::Error),
    /// The server closed the connection mid-handshake: a plaintext ZooKeeper reading our
    /// ClientHello as a malformed request does so.
    Closed(std::io::Error),
}

/// After zookeeper-client failed to connect over TLS (it reports every failure as a lost
/// connection), one handshake of our own with the first host tells a permanent refusal (an
/// unknown CA, a name mismatch, a server that does not speak TLS) from an unreachable server.
/// `Some` is the permanent error to return; `None` leaves the client's temporary one.
pub(crate) async fn diagnose(connect: &str, ca_pem: &str) -> Option<LockError> {
    let roots = roots(ca_pem).ok()?;
    let (host, refused) = first_handshake(connect, roots, Duration::from_secs(2)).await?;
    let why = match refused {
        Refused::Tls(e) => e.to_string(),
        Refused::Closed(e) => {
            format!(
                "the server closed the connection during the handshake ({e}): is it serving TLS on this port?"
            )
        }
    };
    Some(LockError::permanent(NAME, format!("tls handshake with zookeeper at {host}: {why}")))
}

/// After a plaintext connection failed: a server that answers a TLS handshake with a
/// certificate serves TLS only there, and a plaintext client will never get in. A short wait
/// for the answer: this runs on every failed connection of a plaintext client, and a server
/// that is slow to answer is not told apart (its error stays temporary).
pub(crate) async fn diagnose_plaintext(connect: &str) -> Option<LockError> {
    let (host, refused) =
        first_handshake(connect, rustls::RootCertStore::empty(), Duration::from_millis(500)).await?;
    // With no root trusted, a certificate that fails to verify is proof of a TLS server.
    matches!(refused, Refused::Tls(rustls::Error::InvalidCertificate(_))).then(|| {
        LockError::permanent(
            NAME,
            format!("zookeeper at {host} serves TLS on this port: connect with zks://"),
        )
    })
}

/// A handshake with the first host of `connect`, and the host.
async fn first_handshake(
    connect: &str,
    roots: rustls::RootCertStore,
    answer_within: Duration,
) -> Option<(String, Refused)> {
    let host = crate::config::hosts(connect).next()?.trim().to_owned();
    let (name, port) = crate::config::split_host(&host)?;
    let (name, port) = (name.trim_matches(['[', ']']).to_owned(), port.unwrap_or("2181").parse().ok()?);
    let refused =
        tokio::task::spawn_blocking(move || handshake(&name, port, roots, answer_within)).await.ok()??;
    Some((host, refused))
}

/// Whether a failure to connect may be the server refusing the handshake (the client reports
/// every handshake failure as a lost connection, and then no host or a timeout).
pub(crate) fn may_be_refused(e: &zk::Error) -> bool {
    matches!(e, zk::Error::NoHosts | zk::Error::ConnectionLoss | zk::Error::Timeout)
}

/// The handshake's refusal, if the server answered at all.
fn handshake(
    host: &str,
    port: u16,
    roots: rustls::RootCertStore,
    answer_within: Duration,
) -> Option<Refused> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .ok()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let server = ServerName::try_from(host.to_owned()).ok()?;
    let mut conn = rustls::ClientConnection::new(Arc::new(config), server).ok()?;
    let addr = (host, port).to_socket_addrs().ok()?.next()?;
    let mut sock = TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok()?;
    sock.set_read_timeout(Some(answer_within)).ok()?;
    sock.set_write_timeout(Some(answer_within)).ok()?;
    while conn.is_handshaking() {
        if let Err(e) = conn.complete_io(&mut sock) {
            use std::io::ErrorKind::{ConnectionAborted, ConnectionReset, InvalidData, UnexpectedEof};
            return match e.kind() {
                InvalidData => e.into_inner()?.downcast::<rustls::Error>().ok().map(|e| Refused::Tls(*e)),
                UnexpectedEof | ConnectionReset | ConnectionAborted => Some(Refused::Closed(e)),
                _ => None,
            };
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ca_that_is_not_pem_is_refused() {
        for bad in ["", "not a certificate", "-----BEGIN CERTIFICATE-----\n@@@\n-----END CERTIFICATE-----\n"]
        {
            assert!(matches!(options(bad), Err(LockError::InvalidConfig { .. })), "{bad:?}");
        }
    }

    #[test]
    fn the_provider_can_be_installed_twice() {
        install_provider();
        install_provider();
        assert!(rustls::crypto::CryptoProvider::get_default().is_some());
    }
}
