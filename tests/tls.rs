//! TLS end to end against servers started here with certificates made here: a throwaway CA
//! signs a certificate for 127.0.0.1; Redis listens with `--tls-port`, MariaDB with `ssl-cert`.
//! A lock round trip works over TLS with that CA trusted, and a client that trusts another CA
//! is refused with an error that names the certificate problem (and no password).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use lock_core::{LockError, Locker};
use lock_testkit::server::{MariaDbServer, RedisServer, free_port, require_servers};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};

/// A CA (PEM) and a server certificate and key (PEM) it signed for 127.0.0.1 and localhost.
struct Pki {
    ca: String,
    cert: String,
    key: String,
}

fn pki(name: &str) -> Pki {
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("ca params");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.distinguished_name.push(DnType::CommonName, format!("dlock test CA {name}"));
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().expect("ca key")).expect("ca");
    let key = KeyPair::generate().expect("key");
    let params =
        CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()]).expect("params");
    let cert = params.signed_by(&key, &ca).expect("server cert");
    Pki { ca: ca.pem(), cert: cert.pem(), key: key.serialize_pem() }
}

fn write(dir: &Path, pki: &Pki) -> (String, String, String) {
    let p = |n: &str, body: &str| {
        let path = dir.join(n);
        std::fs::write(&path, body).expect("write pem");
        path.to_string_lossy().into_owned()
    };
    (p("ca.pem", &pki.ca), p("server.pem", &pki.cert), p("server.key", &pki.key))
}

fn started<T>(r: Result<T, lock_testkit::server::ServerError>, what: &str) -> Option<T> {
    match r {
        Ok(s) => Some(s),
        Err(e) if e.is_missing_binary() && !require_servers() => {
            eprintln!("SKIPPED tls/{what}: {e}");
            None
        }
        Err(e) => panic!("{what}: {e}"),
    }
}

/// The whole error chain, for matching on the cause.
fn chain(e: &LockError) -> String {
    let mut s = e.to_string();
    let mut src = std::error::Error::source(e);
    while let Some(x) = src {
        s.push_str(": ");
        s.push_str(&x.to_string());
        src = x.source();
    }
    s
}

async fn round_trip(a: Locker, b: Locker) {
    let g = a.lock("tls-key").wait(Duration::from_secs(5)).acquire().await.expect("acquire over TLS");
    assert!(g.fence().is_some());
    assert!(b.try_lock("tls-key").await.expect("try over TLS").is_none(), "second client must be refused");
    g.release().await.expect("release over TLS");
    b.try_lock("tls-key").await.expect("try").expect("free").release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_over_tls_with_a_private_ca() {
    let dir = tempfile::tempdir().expect("tmp");
    let (good, other) = (pki("redis"), pki("other"));
    let (ca, cert, key) = write(dir.path(), &good);
    let tls_port = free_port().expect("port").to_string();
    let args = [
        "--tls-port",
        tls_port.as_str(),
        "--tls-cert-file",
        cert.as_str(),
        "--tls-key-file",
        key.as_str(),
        "--tls-ca-cert-file",
        ca.as_str(),
        "--tls-auth-clients",
        "no",
        "--requirepass",
        "tls-secret-pw",
    ];
    let Some(_srv) = started(RedisServer::start_with(&args), "redis") else { return };
    let url = format!("rediss://:tls-secret-pw@127.0.0.1:{tls_port}/");
    let client = |ca: String| {
        let url = url.clone();
        async move { lock_redis_builder(&url, ca.into_bytes()).await }
    };
    let (a, b) = (client(good.ca.clone()).await, client(good.ca.clone()).await);
    round_trip(Locker::new(Arc::new(a.expect("client a"))), Locker::new(Arc::new(b.expect("client b"))))
        .await;

    let refused = client(other.ca.clone()).await.expect_err("a server certificate from an unknown CA");
    let msg = chain(&refused);
    eprintln!("redis, wrong CA: {msg}");
    assert!(
        msg.to_ascii_lowercase().contains("certificate"),
        "the error must name the certificate problem: {msg}"
    );
    assert!(!msg.contains("tls-secret-pw"), "{msg}");
}

async fn lock_redis_builder(url: &str, ca: Vec<u8>) -> Result<dlock::lock_redis::RedisLock, LockError> {
    dlock::lock_redis::RedisLock::builder()
        .url(url)
        .tls_root_cert(ca)
        .connection_timeout(Duration::from_secs(2))
        .build()
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_over_tls_with_identity_verification() {
    let dir = tempfile::tempdir().expect("tmp");
    let (good, other) = (pki("mariadb"), pki("other"));
    let (ca, cert, key) = write(dir.path(), &good);
    let (other_ca, ..) = {
        let d = dir.path().join("other");
        std::fs::create_dir(&d).expect("dir");
        write(&d, &other)
    };
    let args = [format!("--ssl-cert={cert}"), format!("--ssl-key={key}"), format!("--ssl-ca={ca}")];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let Some(srv) = started(MariaDbServer::start_with(&args), "mariadb") else { return };
    let url = |ca: &str| format!("{}?ssl-mode=verify_identity&ssl-ca={ca}", srv.url());
    for mode in ["pessimistic", "optimistic"] {
        let u = format!("{}&mode={mode}", url(&ca));
        let a = dlock::from_url(&u).await.expect("client over TLS");
        let b = dlock::from_url(&u).await.expect("client over TLS");
        round_trip(Locker::new(a), Locker::new(b)).await;
    }
    // The connection really is encrypted.
    let pool = dlock::lock_mysql::sqlx::mysql::MySqlPoolOptions::new()
        .max_connections(1)
        .connect(&url(&ca))
        .await
        .expect("pool");
    let (_, cipher): (String, String) =
        dlock::lock_mysql::sqlx::query_as("SHOW SESSION STATUS LIKE 'Ssl_cipher'")
            .fetch_one(&pool)
            .await
            .expect("status");
    assert!(!cipher.is_empty(), "no TLS cipher on a verify_identity connection");

    let refused = match tokio::time::timeout(Duration::from_secs(30), dlock::from_url(&url(&other_ca))).await
    {
        Ok(r) => r.map(drop).expect_err("a server certificate from an unknown CA"),
        Err(_) => panic!("a wrong CA must be refused, not hang"),
    };
    let msg = chain(&refused);
    eprintln!("mariadb, wrong CA: {msg}");
    let lower = msg.to_ascii_lowercase();
    assert!(
        lower.contains("certificate") || lower.contains("unknownissuer") || lower.contains("tls"),
        "{msg}"
    );
    assert!(!msg.contains(lock_testkit::server::MARIADB_PASSWORD), "{msg}");
}
