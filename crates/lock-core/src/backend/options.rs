//! The one URL query-option parser: typed options, duplicates and unknown names rejected.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use super::redact::{percent_decode, split_userinfo};
use crate::{LockError, Result};

/// The query options of a backend URL, taken one by one by name and type.
///
/// The query starts at the first `?` after the userinfo (a raw password may contain `?`).
/// A name given twice is an error (which one would win is a guess); [`finish`](Self::finish)
/// rejects any option nobody took, so a typo is an error rather than a silently ignored
/// setting; [`into_url`](Self::into_url) instead puts the options not taken back for a driver
/// that reads its own.
///
/// ```
/// use std::time::Duration;
/// use lock_core::backend::UrlOptions;
///
/// let mut o = UrlOptions::parse("zk://h:2181/locks?session_timeout=2s&acl=open")?;
/// assert_eq!(o.take_duration("session_timeout")?, Some(Duration::from_secs(2)));
/// assert_eq!(o.take::<String>("acl")?.as_deref(), Some("open"));
/// assert_eq!(o.finish()?, "zk://h:2181/locks");
/// # Ok::<(), lock_core::LockError>(())
/// ```
pub struct UrlOptions {
    base: String,
    pairs: Vec<(String, String)>,
    taken: Vec<&'static str>,
}

impl fmt::Debug for UrlOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Names only: values may be anything the user typed, the base carries the userinfo.
        let names: Vec<&str> = self.pairs.iter().map(|(n, _)| n.as_str()).collect();
        f.debug_struct("UrlOptions").field("options", &names).finish()
    }
}

fn invalid(reason: String) -> LockError {
    LockError::InvalidConfig { reason }
}

/// Whether an option's value must not be echoed in an error.
fn secret(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    ["pass", "secret", "token", "key", "auth"].iter().any(|s| n.contains(s))
}

impl UrlOptions {
    /// Split `url` into its base and its query options.
    ///
    /// # Errors
    /// [`LockError::InvalidConfig`] for an option given twice or without a name.
    pub fn parse(url: &str) -> Result<Self> {
        let (head, rest) = url.split_once("://").unwrap_or(("", url));
        let (userinfo, after) = split_userinfo(rest);
        let (authority_path, query) = match after.split_once('?') {
            Some((a, q)) => (a, q),
            None => (after, ""),
        };
        let mut base = String::with_capacity(url.len());
        if !head.is_empty() || url.contains("://") {
            base.push_str(head);
            base.push_str("://");
        }
        if let Some(u) = userinfo {
            base.push_str(u);
            base.push('@');
        }
        base.push_str(authority_path);
        let mut pairs: Vec<(String, String)> = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            if name.is_empty() {
                return Err(invalid(format!(
                    "url option without a name: {:?}",
                    if secret(pair) { "***" } else { pair }
                )));
            }
            if pairs.iter().any(|(n, _)| n == name) {
                return Err(invalid(format!("url option {name} is given twice")));
            }
            pairs.push((name.to_owned(), value.to_owned()));
        }
        Ok(UrlOptions { base, pairs, taken: Vec::new() })
    }

    /// The URL without its query.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// Names of the options not taken yet.
    pub fn remaining(&self) -> impl Iterator<Item = &str> {
        self.pairs.iter().map(|(n, _)| n.as_str())
    }

    fn take_raw(&mut self, name: &'static str) -> Option<String> {
        self.taken.push(name);
        let i = self.pairs.iter().position(|(n, _)| n == name)?;
        Some(percent_decode(&self.pairs.remove(i).1))
    }

    /// Take option `name`, parsed as `T`.
    ///
    /// # Errors
    /// [`LockError::InvalidConfig`] naming the option (and its value, unless the name says it
    /// is a secret) when it does not parse.
    pub fn take<T>(&mut self, name: &'static str) -> Result<Option<T>>
    where
        T: FromStr,
        T::Err: fmt::Display,
    {
        let Some(raw) = self.take_raw(name) else { return Ok(None) };
        raw.parse::<T>().map(Some).map_err(|e| {
            let shown = if secret(name) { "***".to_owned() } else { format!("{raw:?}") };
            invalid(format!("invalid value {shown} for url option {name}: {e}"))
        })
    }

    /// Take an option the driver accepts under two spellings, `name` or `alias`: either one,
    /// not both.
    ///
    /// # Errors
    /// [`LockError::InvalidConfig`] when both are given or the value does not parse.
    pub fn take_either<T>(&mut self, name: &'static str, alias: &'static str) -> Result<Option<T>>
    where
        T: FromStr,
        T::Err: fmt::Display,
    {
        match (self.take::<T>(name)?, self.take::<T>(alias)?) {
            (Some(_), Some(_)) => {
                Err(invalid(format!("url options {name} and {alias} are one option, given twice")))
            }
            (a, b) => Ok(a.or(b)),
        }
    }

    /// Take a duration option with its unit, in the grammar of the CLI and the config file
    /// (humantime: `250ms`, `2s`, `1m`, `1h 30m`). A bare number is refused: it meant
    /// milliseconds here and seconds on the command line.
    ///
    /// # Errors
    /// [`LockError::InvalidConfig`] when it does not parse, saying how to write it.
    pub fn take_duration(&mut self, name: &'static str) -> Result<Option<Duration>> {
        self.take::<UrlDuration>(name).map(|d| d.map(|d| d.0))
    }

    /// Take a duration option whose name gives its unit (`session_timeout_ms=600`): a whole
    /// number of milliseconds.
    ///
    /// # Errors
    /// [`LockError::InvalidConfig`] when it is not one.
    pub fn take_millis(&mut self, name: &'static str) -> Result<Option<Duration>> {
        self.take::<u64>(name).map(|d| d.map(Duration::from_millis))
    }

    /// Take a flag: `true|false|1|0|yes|no|on|off`; a bare `name` means true.
    ///
    /// # Errors
    /// [`LockError::InvalidConfig`] for any other value.
    pub fn take_flag(&mut self, name: &'static str) -> Result<Option<bool>> {
        let Some(raw) = self.take_raw(name) else { return Ok(None) };
        match raw.to_ascii_lowercase().as_str() {
            "" | "true" | "1" | "yes" | "on" => Ok(Some(true)),
            "false" | "0" | "no" | "off" => Ok(Some(false)),
            _ => Err(invalid(format!("invalid value {raw:?} for url option {name}: expected true or false"))),
        }
    }

    /// The URL without its query, after every option was taken.
    ///
    /// # Errors
    /// [`LockError::InvalidConfig`] naming the options nobody took (and those it knows).
    pub fn finish(self) -> Result<String> {
        if self.pairs.is_empty() {
            return Ok(self.base);
        }
        let unknown: Vec<&str> = self.remaining().collect();
        let mut known = self.taken.clone();
        known.sort_unstable();
        known.dedup();
        Err(invalid(format!(
            "unknown url option{} {} (known: {})",
            if unknown.len() > 1 { "s" } else { "" },
            unknown.join(", "),
            if known.is_empty() { "none".to_owned() } else { known.join(", ") }
        )))
    }

    /// The URL with the options not taken put back as written, for a driver that reads its own.
    pub fn into_url(self) -> String {
        if self.pairs.is_empty() {
            return self.base;
        }
        let query: Vec<String> = self.pairs.iter().map(|(n, v)| format!("{n}={v}")).collect();
        format!("{}?{}", self.base, query.join("&"))
    }
}

/// A duration as URL options write it.
struct UrlDuration(Duration);

impl FromStr for UrlDuration {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        parse_duration(s).map(UrlDuration)
    }
}

/// A duration with its unit, in the one grammar of URL options, the CLI and the config file
/// (humantime: `500ms`, `3s`, `1m`, `1h 30m`). A bare number is refused with the fix, since
/// it used to mean milliseconds in a URL and seconds on the command line; so is a bare `0`,
/// which the CLI takes for "no wait" itself where that means something.
///
/// # Errors
/// A message saying what to write.
pub fn parse_duration(s: &str) -> std::result::Result<Duration, String> {
    let s = s.trim();
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return Err(format!("{s:?} has no unit: write {s}ms or {s}s (or m, h)"));
    }
    humantime::parse_duration(s).map_err(|e| format!("{s:?} is not a duration ({e}): write 500ms, 3s or 1m"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_typed_options_and_rejects_the_rest() {
        let mut o = UrlOptions::parse("redis://u:p%3Fw@h:1/0?mode=fair&key_prefix=a%3Ab&protocol=resp3")
            .expect("parse");
        assert_eq!(o.take::<String>("mode").expect("mode").as_deref(), Some("fair"));
        assert_eq!(o.take::<String>("key_prefix").expect("prefix").as_deref(), Some("a:b"));
        assert_eq!(o.take::<u32>("absent").expect("absent"), None);
        assert_eq!(o.into_url(), "redis://u:p%3Fw@h:1/0?protocol=resp3");

        let mut o = UrlOptions::parse("zk://h:1/r?session_timeout=2s&typo=1").expect("parse");
        assert_eq!(o.take_duration("session_timeout").expect("d"), Some(Duration::from_secs(2)));
        let e = o.finish().expect_err("typo").to_string();
        assert!(e.contains("typo") && e.contains("session_timeout"), "{e}");
    }

    #[test]
    fn duplicates_bad_values_and_raw_passwords() {
        assert!(UrlOptions::parse("mysql://h/db?a=1&a=2").is_err());
        let mut o = UrlOptions::parse("mysql://h/db?wait=soon").expect("parse");
        assert!(o.take_duration("wait").expect_err("bad").to_string().contains("soon"));
        let mut o = UrlOptions::parse("mysql://h/db?password=s3cr3t").expect("parse");
        assert!(!o.take::<u32>("password").expect_err("bad").to_string().contains("s3cr3t"));
        // A raw password with `?` and `&` is userinfo, not a query.
        let o = UrlOptions::parse("redis://:a?b&c=d@h:1/0").expect("parse");
        assert_eq!(o.remaining().count(), 0);
        assert_eq!(o.finish().expect("no options"), "redis://:a?b&c=d@h:1/0");
        let mut o = UrlOptions::parse("x://h?flag&off=0").expect("parse");
        assert_eq!(o.take_flag("flag").expect("flag"), Some(true));
        assert_eq!(o.take_flag("off").expect("off"), Some(false));
        assert_eq!(o.take_duration("absent").expect("absent"), None);
        let mut o = UrlOptions::parse("x://h?ssl-mode=a&sslmode=b&tz=c").expect("parse");
        assert!(
            o.take_either::<String>("ssl-mode", "sslmode").expect_err("both").to_string().contains("twice")
        );
        assert_eq!(o.take_either::<String>("time-zone", "tz").expect("tz").as_deref(), Some("c"));
        // One grammar with the CLI: a unit always; a bare number is refused with the fix,
        // except under a name that gives the unit.
        let e = UrlOptions::parse("x://h?t=1500").expect("p").take_duration("t").expect_err("bare");
        assert!(e.to_string().contains("1500ms or 1500s"), "{e}");
        let mut o = UrlOptions::parse("x://h?t=1h%2030m&u=250ms&t_ms=1500").expect("p");
        assert_eq!(o.take_duration("t").expect("t"), Some(Duration::from_secs(5400)));
        assert_eq!(o.take_duration("u").expect("u"), Some(Duration::from_millis(250)));
        assert_eq!(o.take_millis("t_ms").expect("t_ms"), Some(Duration::from_millis(1500)));
    }
}
