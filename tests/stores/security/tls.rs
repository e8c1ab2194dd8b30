//! TLS end to end: a TLS-only Redis, MariaDB with `require_secure_transport` and a TLS-only
//! etcd, each with a throwaway CA (`lock_testkit::pki`).

use super::*;
use dlock::lock_etcd::EtcdLock;
use dlock::lock_redis::Mode;
use lock_etcd_testing::EtcdServer;
use lock_mysql_testing::MARIADB_PASSWORD;
pub(super) use lock_testkit::pki::Pki;

/// The refusal of a client that trusts another CA than the server's (within 20 s), which must
/// name the certificate problem; and its text.
async fn refused_certificate<T>(
    store: &str,
    connect: impl Future<Output = Result<T, LockError>>,
) -> (LockError, String) {
    let started = Instant::now();
    let refused = refusal("a server certificate from an unknown CA", Duration::from_secs(20), connect).await;
    let msg = chain(&refused);
    eprintln!("{store}, wrong CA ({:?}): {msg}", started.elapsed());
    assert!(names_certificate_problem(&msg), "the error must name the certificate problem: {msg}");
    (refused, msg)
}

/// The error names the certificate problem (rustls: `invalid peer certificate:
/// UnknownIssuer`).
fn names_certificate_problem(msg: &str) -> bool {
    let lower = msg.to_ascii_lowercase();
    lower.contains("certificate") || lower.contains("unknownissuer")
}

const REDIS_PW: &str = "tlsRedisPw7Qx";

/// A TLS-only redis-server with `REDIS_PW`, certified by `pki`, and its `rediss://` URL.
fn redis_tls(pki: &Pki) -> Option<(RedisServer, String)> {
    let srv = or_skip("redis-tls", RedisServer::start_tls(&pki.files, &["--requirepass", REDIS_PW]))?;
    let url = format!("rediss://:{REDIS_PW}@127.0.0.1:{}/", srv.port());
    Some((srv, url))
}

async fn redis_tls_lock(url: &str, ca: &str) -> Result<RedisLock, LockError> {
    RedisLock::builder().url(url).tls_root_cert(ca.as_bytes().to_vec()).build().await
}

fn tls_client(url: &str, ca: &str) -> redis::Client {
    let certs = redis::TlsCertificates { client_tls: None, root_cert: Some(ca.as_bytes().to_vec()) };
    redis::Client::build_with_tls(url, certs).expect("tls client")
}

/// Redis with TLS only (`--port 0`): round trips through `tls_root_cert` and through a
/// `redis::Client` built with the CA, with the waiter's pub/sub subscription over TLS too;
/// a plaintext client gets nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_round_trip_over_tls_with_a_private_ca() {
    let logs = capture();
    let pki = Pki::new("redis");
    let Some((srv, url)) = redis_tls(&pki) else { return };
    for mode in [Mode::Simple, Mode::Reentrant, Mode::Fair] {
        let a = RedisLock::builder().url(&url).tls_root_cert(pki.ca_pem.as_bytes().to_vec()).mode(mode);
        let a = Locker::new(Arc::new(a.build().await.expect("client a over TLS")));
        let b = RedisLock::builder().client(tls_client(&url, &pki.ca_pem)).mode(mode);
        let b = Locker::new(Arc::new(b.build().await.expect("client b over TLS")));
        round_trip(&a, &b, &format!("tls-{mode:?}")).await;
    }
    // The waiter's subscriber connection is a TLS connection as well.
    let mut admin = tls_client(&url, &pki.ca_pem).get_multiplexed_async_connection().await.expect("admin");
    let a = Locker::new(Arc::new(redis_tls_lock(&url, &pki.ca_pem).await.expect("client")));
    let b = Locker::new(Arc::new(redis_tls_lock(&url, &pki.ca_pem).await.expect("client")));
    let g = a.try_lock("tls-sub").await.expect("try").expect("free");
    let b2 = b.clone();
    let waiter =
        tokio::spawn(async move { b2.lock("tls-sub").wait(Duration::from_secs(10)).acquire().await });
    let mut channels: Vec<String> = Vec::new();
    for _ in 0..100 {
        channels = redis::cmd("PUBSUB").arg("CHANNELS").query_async(&mut admin).await.expect("pubsub");
        if !channels.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!channels.is_empty(), "the waiter never subscribed over TLS");
    g.release().await.expect("release");
    waiter.await.expect("task").expect("woken").release().await.expect("release");

    // Plaintext to the TLS port: refused, quickly.
    let plain = format!("redis://:{REDIS_PW}@127.0.0.1:{}/", srv.port());
    let refused = refusal(
        "a plaintext client must get nothing from a TLS-only server",
        Duration::from_secs(15),
        dlock::from_url(&plain),
    )
    .await;
    eprintln!("redis, plaintext to the TLS port: {}", chain(&refused));

    assert_no_secret(&chain(&refused), &[REDIS_PW], "plaintext refusal");
    assert_no_secret(&logs.text(), &[REDIS_PW], "logs");
}

/// A server certificate from an unknown CA: refused at once, naming the certificate, without
/// the password, as a backend error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_with_a_wrong_ca_is_refused() {
    let logs = capture();
    let (good, other) = (Pki::new("redis"), Pki::new("other"));
    let Some((_srv, url)) = redis_tls(&good) else { return };
    let started = Instant::now();
    let (refused, msg) = refused_certificate("redis", redis_tls_lock(&url, &other.ca_pem)).await;
    assert!(matches!(refused, LockError::Backend { .. }), "{msg}");
    assert!(started.elapsed() < Duration::from_secs(5), "took {:?}", started.elapsed());
    assert_no_secret(&msg, &[REDIS_PW], "wrong-CA error");
    // The same through a client built with the wrong CA.
    let client = RedisLock::builder().client(tls_client(&url, &other.ca_pem)).build();
    let refused = refusal("a server certificate from an unknown CA", Duration::from_secs(15), client).await;
    assert!(names_certificate_problem(&chain(&refused)), "{}", chain(&refused));
    assert_no_secret(&chain(&refused), &[REDIS_PW], "wrong-CA error");
    assert_no_secret(&logs.text(), &[REDIS_PW], "logs");
}

/// A certificate the client cannot trust does not heal by retrying: the error should be
/// permanent, so `dlock run` exits 69 only for outages, and callers do not retry forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_certificate_failure_is_permanent() {
    capture();
    let (good, other) = (Pki::new("redis"), Pki::new("other"));
    let Some(srv) = or_skip("redis-tls", RedisServer::start_tls(&good.files, &[])) else { return };
    let url = format!("rediss://127.0.0.1:{}/", srv.port());
    let refused = redis_tls_lock(&url, &other.ca_pem).await.expect_err("unknown CA");
    assert!(!refused.is_temporary(), "{}", chain(&refused));
}

/// The same for MariaDB.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_certificate_failure_is_permanent() {
    capture();
    let (good, other) = (Pki::new("mariadb"), Pki::new("other"));
    let Some(srv) = or_skip("mariadb-tls", MariaDbServer::start_tls(&good.files, &[])) else { return };
    let url = format!("{}?ssl-mode=verify_ca&ssl-ca={}", srv.url(), other.files.ca.display());
    let refused = refusal("unknown CA", Duration::from_secs(30), dlock::from_url(&url)).await;
    assert!(!refused.is_temporary(), "{}", chain(&refused));
}

const CHILD_URL: &str = "DLOCK_SECURITY_CHILD_URL";

/// `dlock::from_url("rediss://...")` verifies against the system store, which
/// `SSL_CERT_FILE` replaces (rustls-native-certs): without it a private CA is refused; a
/// process started with `SSL_CERT_FILE=<ca>` locks over TLS.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rediss_url_verifies_against_ssl_cert_file() {
    let logs = capture();
    let pki = Pki::new("redis-url");
    let Some((_srv, url)) = redis_tls(&pki) else { return };
    let url = format!("{url}?mode=reentrant");
    let text = verifies_against_ssl_cert_file(&url, &pki).await;
    assert_no_secret(&text, &[REDIS_PW], "from_url error and child output");
    assert_no_secret(&logs.text(), &[REDIS_PW], "logs");
}

/// `dlock::from_url(url)` of a server certified by `pki`'s CA: refused while the CA is not in
/// the system store, and locking in a child process whose `SSL_CERT_FILE` names it. The texts
/// seen (the refusal, the child's output).
async fn verifies_against_ssl_cert_file(url: &str, pki: &Pki) -> String {
    let mut seen = String::new();
    if std::env::var_os("SSL_CERT_FILE").is_none() {
        let why = "the private CA is not in the system store";
        let refused = refusal(why, Duration::from_secs(20), dlock::from_url(url)).await;
        seen = chain(&refused);
        assert!(names_certificate_problem(&seen), "{seen}");
    }
    let exe = std::env::current_exe().expect("test binary");
    let out = tokio::process::Command::new(exe)
        .args(["--exact", "security::tls::child_locks_through_url", "--ignored", "--nocapture"])
        .env("SSL_CERT_FILE", &pki.files.ca)
        .env(CHILD_URL, url)
        .output();
    let out = within(Duration::from_secs(60), "child process", out).await.expect("child");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && text.contains("1 passed"), "child failed:\n{text}");
    seen + &text
}

/// Run by [`rediss_url_verifies_against_ssl_cert_file`] and [`etcds_url_verifies_against_ssl_cert_file`]
/// in a child process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "helper: run in a child process by the *_url_verifies_against_ssl_cert_file cases"]
async fn child_locks_through_url() {
    let Ok(url) = std::env::var(CHILD_URL) else { return };
    let a = Locker::new(dlock::from_url(&url).await.expect("a TLS URL with SSL_CERT_FILE"));
    let b = Locker::new(dlock::from_url(&url).await.expect("a TLS URL with SSL_CERT_FILE"));
    round_trip(&a, &b, "tls-url").await;
}

/// MariaDB refusing plaintext: both modes lock over `ssl-mode=verify_identity` with the CA
/// (through `dlock::from_url` and the builder), the session really is encrypted, and a
/// plaintext client is refused by the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_round_trip_over_tls_with_identity_verification() {
    let logs = capture();
    let pki = Pki::new("mariadb");
    let Some(srv) = or_skip("mariadb-tls", MariaDbServer::start_tls(&pki.files, &[])) else { return };
    let tls = format!("{}?ssl-mode=verify_identity&ssl-ca={}", srv.url(), pki.files.ca.display());
    for mode in ["pessimistic", "optimistic"] {
        let u = format!("{tls}&mode={mode}");
        let a = Locker::new(dlock::from_url(&u).await.expect("from_url over TLS"));
        let b = Locker::new(Arc::new(MySqlLock::builder().url(&u).build().await.expect("builder over TLS")));
        round_trip(&a, &b, &format!("tls-{mode}")).await;
    }
    let pool = lock_mysql::sqlx::mysql::MySqlPoolOptions::new()
        .max_connections(1)
        .connect(&tls)
        .await
        .expect("pool");
    let (_, cipher): (String, String) = lock_mysql::sqlx::query_as("SHOW SESSION STATUS LIKE 'Ssl_cipher'")
        .fetch_one(&pool)
        .await
        .expect("status");
    assert!(!cipher.is_empty(), "no TLS cipher on a verify_identity connection");
    pool.close().await;

    let plain = format!("{}?ssl-mode=disabled", srv.url());
    let refused = refusal(
        "require_secure_transport refuses plaintext",
        Duration::from_secs(30),
        dlock::from_url(&plain),
    )
    .await;
    let msg = chain(&refused);
    eprintln!("mariadb, plaintext: {msg}");
    // MariaDB 10.11 answers a plaintext login under require_secure_transport with 1045
    // `Access denied` (newer servers name the insecure transport).
    let lower = msg.to_ascii_lowercase();
    assert!(lower.contains("insecure transport") || lower.contains("1045"), "{msg}");
    assert_no_secret(&msg, &[MARIADB_PASSWORD], "plaintext refusal");
    assert_no_secret(&logs.text(), &[MARIADB_PASSWORD], "logs");
}

/// A server certificate from an unknown CA (`verify_ca` and `verify_identity`): refused
/// within the connect bound, naming the certificate, without the password.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_with_a_wrong_ca_is_refused() {
    let logs = capture();
    let (good, other) = (Pki::new("mariadb"), Pki::new("other"));
    let Some(srv) = or_skip("mariadb-tls", MariaDbServer::start_tls(&good.files, &[])) else { return };
    for ssl_mode in ["verify_ca", "verify_identity"] {
        let url = format!("{}?ssl-mode={ssl_mode}&ssl-ca={}", srv.url(), other.files.ca.display());
        let started = Instant::now();
        let refused = refusal(
            "a server certificate from an unknown CA",
            Duration::from_secs(30),
            dlock::from_url(&url),
        )
        .await;
        let msg = chain(&refused);
        eprintln!("mariadb, {ssl_mode}, wrong CA ({:?}): {msg}", started.elapsed());
        assert!(names_certificate_problem(&msg), "the error must name the certificate problem: {msg}");
        assert_no_secret(&msg, &[MARIADB_PASSWORD], "wrong-CA error");
    }
    // A CA file that does not exist: refused before any lock, naming the file.
    let url = format!("{}?ssl-mode=verify_identity&ssl-ca=/nonexistent/ca.pem", srv.url());
    let refused =
        refusal("a CA file that does not exist", Duration::from_secs(30), dlock::from_url(&url)).await;
    let msg = chain(&refused);
    eprintln!("mariadb, missing CA file: {msg}");
    assert!(
        msg.contains("/nonexistent/ca.pem") || msg.to_ascii_lowercase().contains("no such file"),
        "{msg}"
    );
    assert_no_secret(&msg, &[MARIADB_PASSWORD], "missing-CA error");
    assert_no_secret(&logs.text(), &[MARIADB_PASSWORD], "logs");
}

/// A TLS-only etcd certified by `pki`, and its `etcds://` URL.
fn etcd_tls(pki: &Pki) -> Option<(EtcdServer, String)> {
    let srv = or_skip("etcd-tls", EtcdServer::start_tls(&pki.files))?;
    let url = srv.url("tls");
    Some((srv, url))
}

async fn etcd_tls_lock(url: &str, ca: &str) -> Result<EtcdLock, LockError> {
    EtcdLock::builder().url(url).tls_root_cert(ca.as_bytes().to_vec()).build().await
}

/// etcd serving clients over TLS only: two clients trusting the private CA lock, renew and wake
/// a waiter (its watch runs over TLS too); a plaintext client gets nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_round_trip_over_tls_with_a_private_ca() {
    capture();
    let pki = Pki::new("etcd");
    let Some((srv, url)) = etcd_tls(&pki) else { return };
    let a = Locker::new(Arc::new(etcd_tls_lock(&url, &pki.ca_pem).await.expect("client a over TLS")));
    let b = Locker::new(Arc::new(etcd_tls_lock(&url, &pki.ca_pem).await.expect("client b over TLS")));
    round_trip(&a, &b, "tls-etcd").await;
    let plain = format!("etcd://{}/tls", srv.endpoint());
    let refused = refusal(
        "a plaintext client must get nothing from a TLS-only etcd",
        Duration::from_secs(20),
        dlock::from_url(&plain),
    )
    .await;
    eprintln!("etcd, plaintext: {}", chain(&refused));
}

/// A server certificate from an unknown CA: refused, naming the certificate, and not as an
/// outage to retry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_with_a_wrong_ca_is_refused() {
    capture();
    let (good, other) = (Pki::new("etcd"), Pki::new("other"));
    let Some((_srv, url)) = etcd_tls(&good) else { return };
    let (refused, msg) = refused_certificate("etcd", etcd_tls_lock(&url, &other.ca_pem)).await;
    assert!(!refused.is_temporary(), "{msg}");
}

/// `dlock::from_url("etcds://...")` verifies against the system store, which `SSL_CERT_FILE`
/// replaces: without it the private CA is refused; a process started with it locks over TLS.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcds_url_verifies_against_ssl_cert_file() {
    capture();
    let pki = Pki::new("etcd-url");
    let Some((_srv, url)) = etcd_tls(&pki) else { return };
    verifies_against_ssl_cert_file(&url, &pki).await;
}
