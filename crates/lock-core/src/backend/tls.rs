//! The process's rustls crypto provider, which every store's TLS shares.
//!
//! rustls picks a process-wide default provider by itself only when exactly one is compiled
//! in. The stores' clients bring ring (redis, sqlx, tonic), but zookeeper-client's TLS brings
//! aws-lc-rs as well, and with both compiled into one program (`dlock`'s `zk-tls` next to
//! MySQL or PostgreSQL over TLS) a verifier that asks for the default finds none and panics.
//! So every store installs ring before its first TLS connection, unless the application (or
//! another store) installed a provider already, which then serves everyone.

/// Make ring the process's rustls provider unless one is installed already.
pub fn ensure_tls_provider() {
    // Err means a provider is installed already: the application's choice wins.
    let _ = rustls::crypto::ring::default_provider().install_default();
}
