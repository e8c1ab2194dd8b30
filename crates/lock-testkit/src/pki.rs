//! A throwaway certificate authority for the TLS tests of every store: a CA and a server
//! certificate it signed for 127.0.0.1 and localhost, as PEM and as files.

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};

use crate::server::TlsFiles;

/// A CA and a server certificate it signed, as PEM strings and as files (removed on drop).
#[derive(Debug)]
pub struct Pki {
    /// The CA's certificate, PEM (what a client trusts).
    pub ca_pem: String,
    /// The CA, the server's certificate and its key, as files a server is started with.
    pub files: TlsFiles,
    _dir: tempfile::TempDir,
}

impl Pki {
    /// A fresh CA named after `name` (a test that needs two CAs tells them apart by it).
    ///
    /// # Panics
    /// When the keys cannot be made or the files written (a test's fixture is broken).
    pub fn new(name: &str) -> Pki {
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("ca params");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.distinguished_name.push(DnType::CommonName, format!("dlock test CA {name}"));
        let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().expect("ca key")).expect("ca");
        let key = KeyPair::generate().expect("key");
        let params =
            CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()]).expect("params");
        let cert = params.signed_by(&key, &ca).expect("server cert");
        let dir = tempfile::tempdir().expect("tmp");
        let put = |n: &str, body: &str| {
            let path = dir.path().join(n);
            std::fs::write(&path, body).expect("write pem");
            path
        };
        let files = TlsFiles {
            ca: put("ca.pem", &ca.pem()),
            cert: put("server.pem", &cert.pem()),
            key: put("server.key", &key.serialize_pem()),
        };
        Pki { ca_pem: ca.pem(), files, _dir: dir }
    }
}
