//! ZooKeeper over TLS (feature `tls`) against a TLS-only server (no plaintext client port),
//! certified by a throwaway CA: the right CA locks, unlocks and fences; a wrong CA and a
//! plaintext client are refused with a permanent error that says why.

#[cfg(not(feature = "tls"))]
#[test]
fn zookeeper_over_tls() {
    eprintln!(
        "SKIPPED: ZooKeeper over TLS needs lock-zk's `tls` feature \
         (cargo test -p lock-zk --features tls --test tls)"
    );
}

#[cfg(feature = "tls")]
mod on {
    use std::path::Path;
    use std::time::{Duration, Instant};

    use lock_core::{LockError, Locker};
    use lock_testkit::pki::Pki;
    use lock_testkit::server::or_skip;
    use lock_zk::ZkLock;
    use lock_zk_testing::ZkServer;

    fn zks_url(port: u16, ca: &Path) -> String {
        format!("zks://127.0.0.1:{port}/tls-test?ca={}&connection_timeout=1s", ca.display())
    }

    /// The error of a connection that must be refused, within 15 s, with its whole text.
    async fn refused(what: &str, url: &str) -> (LockError, String) {
        let started = Instant::now();
        let built = tokio::time::timeout(Duration::from_secs(15), ZkLock::builder().url(url).build()).await;
        let err = match built {
            Err(_) => panic!("{what}: neither connected nor refused within 15 s"),
            Ok(Ok(_)) => panic!("{what}: connected"),
            Ok(Err(e)) => e,
        };
        let mut text = err.to_string();
        let mut source = std::error::Error::source(&err);
        while let Some(s) = source {
            text.push_str(&format!(": {s}"));
            source = s.source();
        }
        eprintln!("{what} ({:?}): {text}", started.elapsed());
        assert!(matches!(err, LockError::Backend { temporary: false, .. }), "{what}: permanent: {err:?}");
        (err, text)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn right_ca_locks_unlocks_and_fences() {
        let pki = Pki::new("server");
        let Some(srv) = or_skip("zookeeper-tls", ZkServer::start_tls(&pki.files, &[])) else { return };
        assert!(srv.is_tls());
        assert!(srv.four_letter("srvr").expect("srvr over TLS").contains("Mode: standalone"));

        let zk = ZkLock::builder()
            .url(&zks_url(srv.port(), &pki.files.ca))
            .build()
            .await
            .expect("connect over TLS");
        let locker = Locker::new(std::sync::Arc::new(zk.clone()) as _);
        let g = locker.try_lock("job").await.expect("try").expect("free");
        let first = g.fence().expect("a fence");
        assert!(locker.try_lock("job").await.expect("try").is_none(), "held over TLS");
        g.release().await.expect("release");
        let g = locker.try_lock("job").await.expect("try").expect("free again");
        assert!(g.fence().expect("a fence") > first, "fences grow");
        g.release().await.expect("release");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_wrong_ca_and_a_plaintext_client_are_refused_for_good() {
        let (pki, other) = (Pki::new("server"), Pki::new("other"));
        let Some(srv) = or_skip("zookeeper-tls", ZkServer::start_tls(&pki.files, &[])) else { return };

        let (_, text) = refused("a wrong CA", &zks_url(srv.port(), &other.files.ca)).await;
        assert!(text.to_ascii_lowercase().contains("certificate"), "names the certificate problem: {text}");

        let plain = format!("zk://127.0.0.1:{}/tls-test?connection_timeout=1s", srv.port());
        let (_, text) = refused("a plaintext client", &plain).await;
        assert!(text.contains("zks://"), "says to use zks://: {text}");
    }

    /// The other way round: zks:// to a plaintext server is refused for good too.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn tls_to_a_plaintext_server_is_refused_for_good() {
        let pki = Pki::new("server");
        let Some(srv) = or_skip("zookeeper", ZkServer::start()) else { return };
        let (_, text) = refused("TLS to a plaintext server", &zks_url(srv.port(), &pki.files.ca)).await;
        assert!(text.contains("tls handshake"), "names the handshake: {text}");
    }
}
