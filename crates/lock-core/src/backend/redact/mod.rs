//! Keeping passwords out of messages: URL redaction and scrubbing, shared by every backend.
//!
//! Users write passwords into URLs raw as often as percent-encoded, so a password may contain
//! `/ ? # @ %` where a URL parser would not expect them. The userinfo is therefore taken to end
//! at the last `@` that is followed by something shaped like a host list, not at the first `/`.
//! For the same reason a database driver gets the credentials through its setters, never
//! through its own URL parser ([`DriverUrl`]).

mod driver;
mod hosts;

pub use driver::{DriverUrl, expect_scheme};
pub use hosts::{HostList, split_host_list};

/// Where the userinfo of `rest` (the URL after `scheme://`) ends: the last `@` followed by a
/// plausible host list (letters, digits, `- . _ : [ ] ,`) up to the next `/`, `?` or `#`.
fn userinfo_end(rest: &str) -> Option<usize> {
    // An empty host counts too (`redis://:pw@/`): redacting too much is safe, too little is not.
    rest.match_indices('@').map(|(i, _)| i).rfind(|&i| {
        let host = rest[i + 1..].split(['/', '?', '#']).next().unwrap_or("");
        host.chars().all(|c| c.is_ascii_alphanumeric() || "-._:[],".contains(c))
    })
}

/// `url` with its password replaced by `***` (`scheme://user:***@host...`); a string that is not
/// a URL comes back as `<unparsable url>` if it contains an `@` (it might hold a secret).
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return if url.contains('@') { "<unparsable url>".to_owned() } else { url.to_owned() };
    };
    match userinfo_end(rest) {
        Some(i) => {
            let (userinfo, host) = (&rest[..i], &rest[i + 1..]);
            match userinfo.split_once(':') {
                Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
                None => format!("{scheme}://{userinfo}@{host}"),
            }
        }
        None => url.to_owned(),
    }
}

/// Split the part of a URL after `scheme://` into its userinfo (if any) and the rest, with the
/// rule of [`redact_url`] (a raw password may contain `/ ? # @`, so parsers must take the
/// userinfo off first and only then look for the path and the query), except for an `@` in
/// the query: when a `?` opens an option (`name=`) after a host list or after credentials, an
/// `@` after it is the option's (`?key_prefix=ops@x`). A raw password that would read as such
/// a head (`u:1234?a=b@h`) must be percent-encoded. (Redaction keeps the plain rule: it takes
/// too much rather than too little.)
pub fn split_userinfo(rest: &str) -> (Option<&str>, &str) {
    match parsed_userinfo_end(rest) {
        Some(i) => (Some(&rest[..i]), &rest[i + 1..]),
        None => (None, rest),
    }
}

/// [`userinfo_end`] with an `@` in an option of the query left to the query: when the first
/// `?` opens an option and what precedes it reads as a URL of its own (credentials ending in
/// an `@`, or a host list with numeric ports), rather than as a password holding `?`.
fn parsed_userinfo_end(rest: &str) -> Option<usize> {
    let end = userinfo_end(rest)?;
    let Some(q) = rest.find('?').filter(|&q| q < end && opens_option(&rest[q + 1..])) else {
        return Some(end);
    };
    let head = &rest[..q];
    match userinfo_end(head) {
        Some(i) => Some(i),
        None if is_host_list(head.split('/').next().unwrap_or("")) => None,
        None => Some(end),
    }
}

/// Whether `authority` is a list of hosts, each a name or `[v6]` with an optional numeric port.
fn is_host_list(authority: &str) -> bool {
    let host = |h: &str| {
        let (name, port) = match h.rsplit_once(':') {
            Some((n, p)) if !n.ends_with(':') && !p.contains(']') => (n, Some(p)),
            _ => (h, None),
        };
        let named = name.chars().all(|c| c.is_ascii_alphanumeric() || "-._".contains(c))
            || (name.starts_with('[') && name.ends_with(']'));
        !name.is_empty()
            && named
            && port.is_none_or(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()))
    };
    !authority.is_empty() && authority.split(',').all(host)
}

/// Whether `query` starts with an option's name and `=`.
fn opens_option(query: &str) -> bool {
    query.split_once('=').is_some_and(|(name, _)| {
        !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

/// The password of `url` as written (possibly percent-encoded), if it has one.
pub fn url_password(url: &str) -> Option<&str> {
    let rest = url.split_once("://")?.1;
    let userinfo = &rest[..userinfo_end(rest)?];
    userinfo.split_once(':').map(|(_, pw)| pw).filter(|pw| !pw.is_empty())
}

/// `msg` with every occurrence of each secret, as written and percent-decoded, replaced by
/// `***`.
pub fn scrub(msg: &str, secrets: &[&str]) -> String {
    let mut out = msg.to_owned();
    for s in secrets.iter().filter(|s| !s.is_empty()) {
        let decoded = percent_decode(s);
        for form in [s.to_string(), decoded] {
            if !form.is_empty() {
                out = out.replace(&form, "***");
            }
        }
    }
    out
}

/// `%XX` sequences decoded (invalid ones kept as they are; invalid UTF-8 replaced).
pub fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        match (b[i], b.get(i + 1).copied().and_then(hex), b.get(i + 2).copied().and_then(hex)) {
            (b'%', Some(h), Some(l)) => {
                out.push(u8::try_from(h * 16 + l).unwrap_or(b'?'));
                i += 3;
            }
            (c, ..) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_with_url_metacharacters_are_redacted() {
        assert_eq!(redact_url("redis://127.0.0.1:6379/0"), "redis://127.0.0.1:6379/0");
        assert_eq!(redact_url("redis://:s3cr3t@h:1/"), "redis://:***@h:1/");
        assert_eq!(redact_url("rediss://app:p@ss@w0rd@h:1/2?x=1"), "rediss://app:***@h:1/2?x=1");
        assert_eq!(redact_url("redis://user@h"), "redis://user@h");
        assert_eq!(redact_url("redis://u:s3/cr?t#p@ss%w0rd@127.0.0.1:1/"), "redis://u:***@127.0.0.1:1/");
        assert_eq!(
            redact_url("mysql://root:a%2Fb%40c@[::1]:3306/db?x=1"),
            "mysql://root:***@[::1]:3306/db?x=1"
        );
        assert_eq!(redact_url("zk://u:p@h1:1,h2:2/root"), "zk://u:***@h1:1,h2:2/root");
        assert_eq!(redact_url("not a url s3cr3t@x"), "<unparsable url>");
        assert_eq!(redact_url("redis://:s3cr3t@/"), "redis://:***@/");
        assert_eq!(split_userinfo("u:p?w#x@h:1/r?q=1"), (Some("u:p?w#x"), "h:1/r?q=1"));
        // An `@` in an option of the query is the option's, with or without credentials.
        assert_eq!(split_userinfo("h:1/r?q=a@b"), (None, "h:1/r?q=a@b"));
        assert_eq!(split_userinfo("h:6379/0?key_prefix=ops@x"), (None, "h:6379/0?key_prefix=ops@x"));
        assert_eq!(split_userinfo("u:pw@h:1/0?key_prefix=ops@x"), (Some("u:pw"), "h:1/0?key_prefix=ops@x"));
        assert_eq!(split_userinfo("u:p@ss@h:1?a=b@c"), (Some("u:p@ss"), "h:1?a=b@c"));
        // A `?` that opens no option, or follows no host list, is the password's.
        assert_eq!(split_userinfo("u:p?w@h:1/?x=1"), (Some("u:p?w"), "h:1/?x=1"));
        assert_eq!(split_userinfo(":a?mode=x@h:1/?mode=y"), (Some(":a?mode=x"), "h:1/?mode=y"));
        assert_eq!(split_userinfo("[::1]:1,h/0?a=b@c"), (None, "[::1]:1,h/0?a=b@c"));
        // Redaction takes the last fitting `@` all the same: too much rather than too little.
        // (A raw password may hold `?name=`, which parsing refuses to read as one.)
        assert_eq!(redact_url("redis://h:1/0?key_prefix=ops@x"), "redis://h:***@x");
        assert_eq!(url_password("redlock://:s3/cr@t@/?mode=simple"), Some("s3/cr@t"));
        assert_eq!(url_password("redis://u:s3/cr?t#p@ss@h:1/"), Some("s3/cr?t#p@ss"));
        assert_eq!(url_password("redis://u@h:1/"), None);
        assert_eq!(scrub("x a/b y a%2Fb z", &["a%2Fb"]), "x *** y *** z");
        assert_eq!(percent_decode("%41%zz%"), "A%zz%");
    }
}
