//! NATS over TLS (feature `tls`) against a TLS-only server certified by a throwaway CA: the
//! right CA locks, wakes a waiter and fences; a wrong CA is refused with a permanent error that
//! names the certificate; a `nats://` client without the CA gets nothing (the server's TLS-only
//! greeting makes it upgrade, and it then refuses the certificate).

#[cfg(not(feature = "tls"))]
#[test]
fn nats_over_tls() {
    eprintln!(
        "SKIPPED: NATS over TLS needs lock-nats's `tls` feature (cargo test -p lock-nats --features tls)"
    );
}

#[cfg(feature = "tls")]
mod on {
    use std::sync::Arc;
    use std::time::Duration;

    use lock_core::{LockError, Locker};
    use lock_nats::NatsLock;
    use lock_nats_testing::NatsServer;
    use lock_testkit::pki::Pki;
    use lock_testkit::server::or_skip;
    use lock_testkit::within;

    fn url(srv: &NatsServer, pki: &Pki) -> String {
        let ca = pki.files.ca.display();
        format!("nats+tls://127.0.0.1:{}/tls?lease_ttl=1s&connect_timeout=2s&ca={ca}", srv.port())
    }

    /// The connection's refusal within 20 s, and its text with every source.
    async fn refused(what: &str, url: &str) -> (LockError, String) {
        let err = within(Duration::from_secs(20), what, NatsLock::from_url(url)).await.expect_err(what);
        let mut text = err.to_string();
        let mut source = std::error::Error::source(&err);
        while let Some(s) = source {
            text.push_str(&format!(": {s}"));
            source = s.source();
        }
        eprintln!("{what}: {text}");
        (err, text)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn round_trip_over_tls_with_a_private_ca() {
        let pki = Pki::new("nats");
        let Some(srv) = or_skip("nats-tls", NatsServer::start_tls(&pki.files)) else { return };
        let url = url(&srv, &pki);
        let a = Locker::new(Arc::new(NatsLock::from_url(&url).await.expect("client a over TLS")));
        let b = Locker::new(Arc::new(NatsLock::from_url(&url).await.expect("client b over TLS")));
        let g = a.lock("k").wait(Duration::from_secs(5)).acquire().await.expect("acquire over TLS");
        assert!(b.try_lock("k").await.expect("try").is_none(), "a second client must be refused");
        let b2 = b.clone();
        let waiter = tokio::spawn(async move { b2.lock("k").wait(Duration::from_secs(10)).acquire().await });
        let first = g.fence().expect("a fence");
        g.release().await.expect("release");
        let next = within(Duration::from_secs(10), "the waiter's grant", waiter).await.expect("task");
        let next = next.expect("the waiter acquires over TLS");
        assert!(next.fence().expect("a fence") > first);
        next.release().await.expect("release");

        let plain = format!("nats://127.0.0.1:{}/tls?lease_ttl=1s&connect_timeout=2s", srv.port());
        refused("a nats:// client of a TLS-only server, without the CA", &plain).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_wrong_ca_is_refused_for_good_naming_the_certificate() {
        let (good, other) = (Pki::new("nats"), Pki::new("other"));
        let Some(srv) = or_skip("nats-tls", NatsServer::start_tls(&good.files)) else { return };
        let (err, text) = refused("a server certificate from an unknown CA", &url(&srv, &other)).await;
        assert!(!err.is_temporary(), "not an outage to retry: {text}");
        let lower = text.to_ascii_lowercase();
        assert!(lower.contains("certificate") || lower.contains("unknownissuer"), "{text}");
    }
}
