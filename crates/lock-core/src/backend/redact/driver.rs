//! A database URL handed to its driver: the credentials through the driver's setters, the rest
//! through its own URL parser.

use std::fmt;
use std::str::FromStr;

use super::{percent_decode, redact_url, scrub, split_userinfo, url_password};
use crate::{LockError, Result};

/// `Ok` when `url` starts with `<scheme>://` for one of `schemes`; otherwise an
/// [`LockError::InvalidConfig`] that names the first (`expected a mysql:// url, got ...`) and
/// shows `url` redacted.
///
/// # Errors
/// As above.
pub fn expect_scheme(url: &str, schemes: &[&str]) -> Result<()> {
    let ok = schemes.iter().any(|s| url.strip_prefix(s).is_some_and(|r| r.starts_with("://")));
    if ok {
        return Ok(());
    }
    let expected = schemes.first().copied().unwrap_or("");
    Err(LockError::InvalidConfig { reason: format!("expected a {expected}:// url, got {}", redact_url(url)) })
}

/// A database URL split for its driver: the address (scheme, hosts, path, no userinfo) for the
/// driver's URL parser, and the user and password, percent-decoded, for its setters. A raw
/// password may hold `/ ? # @ %`, which the driver's parser would split, and its errors quote
/// the URL they were given.
pub struct DriverUrl {
    scheme: &'static str,
    address: String,
    user: Option<String>,
    password: Option<String>,
}

impl fmt::Debug for DriverUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DriverUrl")
            .field("address", &self.address)
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .finish()
    }
}

impl DriverUrl {
    /// Split `base`, a URL without its query (as [`UrlOptions::finish`](crate::backend::UrlOptions::finish)
    /// returns it), into `<scheme>://<hosts and path>` and its credentials. An empty user or
    /// password counts as none.
    pub fn split(base: &str, scheme: &'static str) -> Self {
        let after_scheme = base.split_once("://").map_or(base, |(_, r)| r);
        let (userinfo, address) = split_userinfo(after_scheme);
        let (user, password) = match userinfo {
            Some(u) => u.split_once(':').unwrap_or((u, "")),
            None => ("", ""),
        };
        let decoded = |s: &str| (!s.is_empty()).then(|| percent_decode(s));
        DriverUrl {
            scheme,
            address: format!("{scheme}://{address}"),
            user: decoded(user),
            password: decoded(password),
        }
    }

    /// The address, without credentials.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// The driver's options: the address through its parser, then the user and the password
    /// (where given) through `with_user` and `with_password`.
    ///
    /// # Errors
    /// [`LockError::InvalidConfig`] when the driver cannot parse the address (`cannot parse
    /// <scheme> url <url redacted>: <driver's words>`, scrubbed of `url`'s password).
    pub fn options<T>(
        &self,
        url: &str,
        with_user: impl FnOnce(T, &str) -> T,
        with_password: impl FnOnce(T, &str) -> T,
    ) -> Result<T>
    where
        T: FromStr,
        T::Err: fmt::Display,
    {
        let mut options = self.address.parse::<T>().map_err(|e| {
            // No credentials went in, but scrub anyway: the message is the driver's.
            let secrets: Vec<&str> = url_password(url).into_iter().collect();
            let said = format!("cannot parse {} url {}: {e}", self.scheme, redact_url(url));
            LockError::InvalidConfig { reason: scrub(&said, &secrets) }
        })?;
        if let Some(user) = &self.user {
            options = with_user(options, user);
        }
        if let Some(password) = &self.password {
            options = with_password(options, password);
        }
        Ok(options)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_go_to_the_setters_whole() {
        let d = DriverUrl::split("mariadb://root:s3/cr?t#p@ss%25w@h:1/db", "mysql");
        assert_eq!(d.address(), "mysql://h:1/db");
        let set = |o: String, s: &str| format!("{o} {s}");
        assert_eq!(d.options::<String>("x", set, set).expect("parse"), "mysql://h:1/db root s3/cr?t#p@ss%w");
        let d = DriverUrl::split("postgres://:@h/db", "postgres");
        assert_eq!(d.options::<String>("x", set, set).expect("parse"), "postgres://h/db");
        assert!(!format!("{:?}", DriverUrl::split("a://u:pw@h", "a")).contains("pw"));
        let e =
            DriverUrl::split("a://u:hunter2@h:x", "a").options::<u8>("a://u:hunter2@h:x", |o, _| o, |o, _| o);
        let e = e.expect_err("not a number").to_string();
        assert!(e.contains("cannot parse a url a://u:***@h:x") && !e.contains("hunter2"), "{e}");
    }

    #[test]
    fn schemes_are_checked_and_errors_redacted() {
        assert!(expect_scheme("mariadb://h/db", &["mysql", "mariadb"]).is_ok());
        assert!(expect_scheme("mysqlx://h/db", &["mysql"]).is_err());
        let e =
            expect_scheme("postgres://u:hunter2@h/db", &["mysql", "mariadb"]).expect_err("other").to_string();
        assert!(e.contains("expected a mysql:// url") && !e.contains("hunter2"), "{e}");
    }
}
