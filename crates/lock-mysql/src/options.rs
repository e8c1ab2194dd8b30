//! What a `mysql://` URL can say: the mode, the table, and the driver's connection options,
//! each parsed by name and type. A typo'd or repeated option is an error, never ignored.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use lock_core::Result;
use lock_core::backend::UrlOptions;
use lock_core::backend::redact::{DriverUrl, expect_scheme};
use lock_core::backend::session::{DriverSettings, refuse_tls_without_feature};
use sqlx::mysql::{MySqlConnectOptions, MySqlSslMode};

/// How locks are kept.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Mode {
    /// A row locked with `SELECT ... FOR UPDATE` by a transaction held open on a dedicated
    /// connection ("数据库悲观锁"). Session-bound: the lock lives exactly as long as the
    /// connection; waiters queue in the server.
    #[default]
    Pessimistic,
    /// A lease row taken by a conditional `UPDATE` judged by the database clock, with a version
    /// that is the fencing token ("数据库乐观锁"). Time-bound: expires unless renewed; waiters
    /// poll.
    Optimistic,
    /// A MySQL/MariaDB user-level lock, `GET_LOCK(name, timeout)`, held by a session on a
    /// dedicated connection until release ("named lock"; URL `?mode=get_lock`).
    /// Session-bound like [`Mode::Pessimistic`]; waiters queue in the server. The name is the
    /// key as .NET's DistributedLock names it ([`lock_name`](crate::lock_name)), so other
    /// services calling `GET_LOCK` with that name share the lock.
    NamedLock,
}

impl Mode {
    /// The name used in URLs (`?mode=`) and in the backend's identity.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Mode::Pessimistic => "pessimistic",
            Mode::Optimistic => "optimistic",
            Mode::NamedLock => "get_lock",
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Mode {
    type Err = String;

    /// `pessimistic`, `optimistic` or `get_lock`.
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "pessimistic" => Ok(Mode::Pessimistic),
            "optimistic" => Ok(Mode::Optimistic),
            "get_lock" => Ok(Mode::NamedLock),
            other => Err(format!("unknown mode {other:?} (expected pessimistic, optimistic or get_lock)")),
        }
    }
}

/// A parsed URL: the driver's options, and ours.
pub(crate) struct UrlConfig {
    pub(crate) connect: MySqlConnectOptions,
    pub(crate) mode: Option<Mode>,
    pub(crate) table: Option<String>,
}

/// Parse a `mysql://` (or `mariadb://`) URL: our options `mode=` and `table=`, the driver's
/// (`ssl-mode`, `ssl-ca`, `ssl-cert`, `ssl-key`, `charset`, `collation`,
/// `statement-cache-capacity`, `socket`, `timezone`, with sqlx's alternative spellings), and
/// nothing else. TLS asked for without the `tls` feature is refused. Errors never echo the
/// password.
pub(crate) fn parse_url(url: &str) -> Result<UrlConfig> {
    expect_scheme(url, &["mysql", "mariadb"])?;
    let mut o = UrlOptions::parse(url)?;
    let mode = o.take::<Mode>("mode")?;
    let table = o.take::<String>("table")?;
    let ssl_mode = o.take_either::<MySqlSslMode>("ssl-mode", "sslmode")?;
    let mut driver = DriverSettings::new();
    driver.add(ssl_mode, MySqlConnectOptions::ssl_mode);
    driver.add(o.take_either::<PathBuf>("ssl-ca", "sslca")?, MySqlConnectOptions::ssl_ca);
    driver.add(o.take_either::<PathBuf>("ssl-cert", "sslcert")?, MySqlConnectOptions::ssl_client_cert);
    driver.add(o.take_either::<PathBuf>("ssl-key", "sslkey")?, MySqlConnectOptions::ssl_client_key);
    driver.add(o.take::<String>("charset")?, |c, v| c.charset(&v));
    driver.add(o.take::<String>("collation")?, |c, v| c.collation(&v));
    driver.add(o.take::<usize>("statement-cache-capacity")?, MySqlConnectOptions::statement_cache_capacity);
    driver.add(o.take::<PathBuf>("socket")?, MySqlConnectOptions::socket);
    driver.add(o.take_either::<String>("timezone", "time-zone")?, |c, tz| c.timezone(Some(tz)));
    let base = o.finish()?;

    let wants_tls = matches!(
        ssl_mode,
        Some(MySqlSslMode::Required | MySqlSslMode::VerifyCa | MySqlSslMode::VerifyIdentity)
    );
    refuse_tls_without_feature(wants_tls, cfg!(feature = "tls"), "lock-mysql")?;
    let connect = DriverUrl::split(&base, "mysql").options(
        url,
        MySqlConnectOptions::username,
        MySqlConnectOptions::password,
    )?;
    Ok(UrlConfig { connect: driver.apply(connect), mode, table })
}

#[cfg(test)]
mod tests {
    use super::*;
    use lock_core::backend::redact::redact_url;

    fn err(url: &str) -> String {
        parse_url(url).err().map(|e| e.to_string()).unwrap_or_default()
    }

    #[test]
    fn errors_hide_the_password() {
        assert_eq!(redact_url("mysql://u:s3cr%40t@h:3306/db?x=1"), "mysql://u:***@h:3306/db?x=1");
        assert_eq!(redact_url("mysql://u@h/db"), "mysql://u@h/db");
        assert_eq!(redact_url("mysql://h/db"), "mysql://h/db");
        assert!(!redact_url("mysql://a:zz@c@h/db").contains("zz"));
        let e = err("postgres://u:hunter2@h/db");
        assert!(e.contains("mysql://") && !e.contains("hunter2"), "{e}");
        let e = err("mysql://u:hunter2@h:notaport/db");
        assert!(!e.is_empty() && !e.contains("hunter2"), "{e}");
    }

    #[test]
    fn takes_our_options_and_the_drivers() {
        let p = parse_url("mariadb://u:pw@h:1/db?mode=optimistic&table=t1").expect("parse");
        assert_eq!((p.mode, p.table.as_deref()), (Some(Mode::Optimistic), Some("t1")));
        assert_eq!((p.connect.get_host(), p.connect.get_port()), ("h", 1));
        assert_eq!((p.connect.get_username(), p.connect.get_database()), ("u", Some("db")));
        let p = parse_url("mysql://h/db?charset=utf8mb4&sslmode=disabled&time-zone=%2B00:00").expect("parse");
        assert_eq!((p.mode, p.connect.get_charset()), (None, "utf8mb4"));
        assert!(matches!(p.connect.get_ssl_mode(), MySqlSslMode::Disabled));
        assert_eq!(parse_url("mysql://h/db?mode=get_lock").expect("parse").mode, Some(Mode::NamedLock));
    }

    #[test]
    fn modes_print_as_they_parse() {
        for m in [Mode::Pessimistic, Mode::Optimistic, Mode::NamedLock] {
            assert_eq!(m.to_string().parse::<Mode>(), Ok(m));
        }
        assert_eq!(Mode::NamedLock.to_string(), "get_lock");
    }

    #[test]
    fn bad_unknown_and_repeated_options_are_refused() {
        assert!(err("mysql://h/db?mode=bogus").contains("bogus"));
        assert!(err("mysql://h/db?mode=optimistic&mode=pessimistic").contains("twice"));
        assert!(err("mysql://h/db?mode=GET_LOCK").contains("get_lock"));
        assert!(err("mysql://h/db?ssl-mode=disabled&sslmode=disabled").contains("twice"));
        // A typo is an error naming it, not a silently ignored setting.
        let e = err("mysql://h/db?mod=optimistic");
        assert!(e.contains("mod") && e.contains("table"), "{e}");
        assert!(err("mysql://h/db?ssl-mode=sometimes").contains("sometimes"));
        assert!(err("mysql://h/db?statement-cache-capacity=-1").contains("statement-cache-capacity"));
    }

    #[test]
    fn raw_passwords_with_url_metacharacters_reach_the_driver_whole() {
        let p = parse_url("mysql://root:s3/cr?t#p@ss%w0rd@127.0.0.1:1/db?mode=optimistic").expect("parse");
        assert_eq!((p.connect.get_host(), p.connect.get_port()), ("127.0.0.1", 1));
        assert_eq!((p.connect.get_username(), p.mode), ("root", Some(Mode::Optimistic)));
        let p = parse_url("mysql://root:s3%2Fcr%3Ft@127.0.0.1:1/db").expect("parse");
        assert_eq!(p.connect.get_database(), Some("db"));
    }

    #[cfg(not(feature = "tls"))]
    #[test]
    fn tls_without_the_feature_is_refused() {
        assert!(err("mysql://h/db?ssl-mode=required").contains("tls"));
        assert!(err("mysql://h/db?ssl-mode=VERIFY_IDENTITY").contains("tls"));
        assert!(parse_url("mysql://h/db?ssl-mode=preferred").is_ok());
    }
}
