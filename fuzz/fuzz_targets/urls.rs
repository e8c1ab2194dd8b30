//! URL parsing and redaction: a password put into a URL, raw or percent-encoded, never shows in
//! the redacted form nor in the scrubbed error of either driver's parser; no parser panics.
#![no_main]

use std::str::FromStr;

use libfuzzer_sys::fuzz_target;
use lock_core::backend::redact::{redact_url, scrub, url_password};
use redis::IntoConnectionInfo;

fuzz_target!(|data: (&str, &str, u8, &str)| {
    let (password, tail, host, raw) = data;
    // Any string at all: no panic anywhere.
    let _ = redact_url(raw);
    let _ = url_password(raw);
    let _ = raw.into_connection_info();
    let _ = sqlx::mysql::MySqlConnectOptions::from_str(raw);

    // A URL with a known password (at least 6 characters, and not a fragment of the rest).
    let hosts = ["127.0.0.1:1", "h", "[::1]:6379", "h1:1,h2:2", "db.example:3306"];
    let host = hosts[usize::from(host) % hosts.len()];
    let tail: String = tail.chars().filter(|c| !matches!(c, '@')).collect();
    let tail = if tail.is_empty() || tail.starts_with(['/', '?', '#']) { tail } else { format!("/{tail}") };
    if password.chars().count() < 6 || password.contains("***") {
        return;
    }
    for scheme in ["redis", "mysql", "zk"] {
        let url = format!("{scheme}://user:{password}@{host}{tail}");
        let visible = format!("{scheme}://user:***@{host}{tail}");
        if visible.contains(password) {
            return;
        }
        let shown = redact_url(&url);
        assert!(!shown.contains(password), "{url:?} -> {shown:?}");
        assert_eq!(url_password(&url), Some(password), "{url:?}");
        let secrets = [password];
        if let Err(e) = url.as_str().into_connection_info() {
            let msg = scrub(&e.to_string(), &secrets);
            assert!(!msg.contains(password), "redis parser error leaks: {msg:?}");
        }
        if let Err(e) = sqlx::mysql::MySqlConnectOptions::from_str(&url) {
            let msg = scrub(&e.to_string(), &secrets);
            assert!(!msg.contains(password), "mysql parser error leaks: {msg:?}");
        }
    }
});
