//! What a `postgres://` URL can say: the fence table, the keep-alive period, and the driver's
//! connection options, each parsed by name and type. A typo'd or repeated option is an error,
//! never ignored.

use std::path::PathBuf;
use std::time::Duration;

use lock_core::backend::UrlOptions;
use lock_core::backend::redact::{DriverUrl, expect_scheme};
use lock_core::backend::session::{DriverSettings, refuse_tls_without_feature};
use lock_core::{LockError, Result};
use sqlx::postgres::{PgConnectOptions, PgSslMode};

/// Longest accepted table name (PostgreSQL identifiers are at most 63 bytes).
pub const MAX_TABLE_NAME: usize = 63;

/// Check a fence table name: lowercase ASCII letters, digits and `_`, not starting with a
/// digit, at most [`MAX_TABLE_NAME`] characters, so it can be spliced into SQL unquoted and
/// means the same table to every tool (PostgreSQL folds unquoted names to lowercase).
///
/// # Errors
/// [`LockError::InvalidConfig`] naming the problem.
pub fn validate_table_name(name: &str) -> Result<()> {
    let bad = |why: &str| Err(invalid(format!("invalid table name {name:?}: {why}")));
    if name.is_empty() {
        return bad("empty");
    }
    if name.len() > MAX_TABLE_NAME {
        return bad("longer than 63 characters");
    }
    if name.as_bytes()[0].is_ascii_digit() {
        return bad("starts with a digit");
    }
    if !name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_') {
        return bad("only lowercase ASCII letters, digits and '_' are allowed");
    }
    Ok(())
}

/// A parsed URL: the driver's options, and ours.
pub(crate) struct UrlConfig {
    pub(crate) connect: PgConnectOptions,
    pub(crate) table: Option<String>,
    pub(crate) keepalive: Option<Duration>,
    pub(crate) fencing: Option<bool>,
}

fn invalid(reason: String) -> LockError {
    LockError::InvalidConfig { reason }
}

/// Parse a `postgres://` (or `postgresql://`) URL: our options `table=`, `keepalive=` and
/// `fencing=`, the
/// driver's `sslmode` (`ssl-mode`), `sslrootcert` (`ssl-root-cert`), `application_name`
/// (`application-name`) and `statement-cache-capacity`, and nothing else. TLS asked for
/// without the `tls` feature is refused. Errors never echo the password.
pub(crate) fn parse_url(url: &str) -> Result<UrlConfig> {
    expect_scheme(url, &["postgres", "postgresql"])?;
    let mut o = UrlOptions::parse(url)?;
    let table = o.take::<String>("table")?;
    let keepalive = o.take_duration("keepalive")?;
    let fencing = o.take_flag("fencing")?;
    let ssl_mode = o.take_either::<PgSslMode>("sslmode", "ssl-mode")?;
    let mut driver = DriverSettings::new();
    driver.add(ssl_mode, PgConnectOptions::ssl_mode);
    driver.add(o.take_either::<PathBuf>("sslrootcert", "ssl-root-cert")?, PgConnectOptions::ssl_root_cert);
    driver
        .add(o.take_either::<String>("application_name", "application-name")?, |c, a| c.application_name(&a));
    driver.add(o.take::<usize>("statement-cache-capacity")?, PgConnectOptions::statement_cache_capacity);
    let base = o.finish()?;

    let wants_tls =
        matches!(ssl_mode, Some(PgSslMode::Require | PgSslMode::VerifyCa | PgSslMode::VerifyFull));
    refuse_tls_without_feature(wants_tls, cfg!(feature = "tls"), "lock-postgres")?;
    let connect = DriverUrl::split(&base, "postgres").options(
        url,
        PgConnectOptions::username,
        PgConnectOptions::password,
    )?;
    Ok(UrlConfig { connect: driver.apply(connect), table, keepalive, fencing })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(url: &str) -> String {
        parse_url(url).err().map(|e| e.to_string()).unwrap_or_default()
    }

    #[test]
    fn errors_hide_the_password() {
        let e = err("mysql://u:hunter2@h/db");
        assert!(e.contains("postgres://") && !e.contains("hunter2"), "{e}");
        let e = err("postgres://u:hunter2@h:notaport/db");
        assert!(!e.is_empty() && !e.contains("hunter2"), "{e}");
    }

    #[test]
    fn takes_our_options_and_the_drivers() {
        let p =
            parse_url("postgresql://u:pw@h:1/db?table=t1&keepalive=250ms&application_name=x").expect("parse");
        assert_eq!((p.table.as_deref(), p.keepalive), (Some("t1"), Some(Duration::from_millis(250))));
        assert_eq!((p.connect.get_host(), p.connect.get_port()), ("h", 1));
        assert_eq!((p.connect.get_username(), p.connect.get_database()), ("u", Some("db")));
        let p = parse_url("postgres://h/db?sslmode=disable").expect("parse");
        assert!(p.table.is_none() && p.keepalive.is_none());
    }

    #[test]
    fn bad_unknown_and_repeated_options_are_refused() {
        assert!(err("postgres://h/db?table=a&table=b").contains("twice"));
        assert!(err("postgres://h/db?sslmode=disable&ssl-mode=disable").contains("twice"));
        let e = err("postgres://h/db?tabel=x");
        assert!(e.contains("tabel"), "{e}");
        assert!(err("postgres://h/db?sslmode=sometimes").contains("sometimes"));
        assert!(err("postgres://h/db?keepalive=soon").contains("keepalive"));
    }

    #[test]
    fn raw_passwords_with_url_metacharacters_reach_the_driver_whole() {
        let p = parse_url("postgres://root:s3/cr?t#p@ss%w0rd@127.0.0.1:1/db?table=t").expect("parse");
        assert_eq!((p.connect.get_host(), p.connect.get_port()), ("127.0.0.1", 1));
        assert_eq!((p.connect.get_username(), p.table.as_deref()), ("root", Some("t")));
    }

    #[test]
    fn table_names_are_lowercase_identifiers_only() {
        for ok in ["dlock_fence", "_x", "locks_2", &"a".repeat(MAX_TABLE_NAME)] {
            assert!(validate_table_name(ok).is_ok(), "{ok}");
        }
        for bad in ["", "1abc", "a b", "Locks", "t\"; DROP TABLE x; --", "s.t", "t'", &"a".repeat(64)] {
            assert!(matches!(validate_table_name(bad), Err(LockError::InvalidConfig { .. })), "{bad}");
        }
    }

    #[cfg(not(feature = "tls"))]
    #[test]
    fn tls_without_the_feature_is_refused() {
        assert!(err("postgres://h/db?sslmode=require").contains("tls"));
        assert!(parse_url("postgres://h/db?sslmode=prefer").is_ok());
    }
}
