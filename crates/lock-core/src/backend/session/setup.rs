//! Building a pooled session store (a hold pins one pooled connection for its life): where its
//! connections come from, the defaults of its pool and keeper, and the first connection.

use std::fmt;
use std::future::Future;
use std::path::Path;
use std::time::Duration;

use crate::LockError;
use crate::backend::redact::redact_url;

/// Size of a pool the builder opens itself: every held lock pins one connection for its whole
/// life, and acquiring one briefly needs another.
pub const DEFAULT_MAX_CONNECTIONS: u32 = 32;
/// Keep-alive period of a held lock's connection: a failed ping fires the lost signal at most
/// this long after the connection died, and the server's idle bound is three of these (6 s),
/// short enough for a crashed holder, long enough for a busy client.
pub const DEFAULT_KEEPALIVE: Duration = Duration::from_secs(2);
/// Time to wait for a pooled connection (after which the error is temporary): past a few
/// seconds the server is down or the pool too small, and the core's retry is the better wait.
pub const DEFAULT_ACQUIRE_TIMEOUT: Duration = Duration::from_secs(5);
/// Shortest keep-alive accepted: below it the pings themselves load the server.
pub const MIN_KEEPALIVE: Duration = Duration::from_millis(10);

/// Where a builder's connections come from: a URL, the driver's connect options (`O`, which
/// carry the password) or the user's pool (`P`).
pub enum Source<O, P> {
    /// Nothing given yet.
    None,
    /// A URL, parsed by `build`.
    Url(String),
    /// Ready-made connect options.
    Options(Box<O>),
    /// The user's pool.
    Pool(P),
}

impl<O, P> fmt::Debug for Source<O, P> {
    // Hand-written: the URL is shown redacted and connect options (which carry the password)
    // are not shown at all.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shown = match self {
            Source::None => "none".to_owned(),
            Source::Url(u) => redact_url(u),
            Source::Options(_) => "connect options".to_owned(),
            Source::Pool(_) => "existing pool".to_owned(),
        };
        fmt::Debug::fmt(&shown, f)
    }
}

impl<O, P> Source<O, P> {
    /// A URL turned into connect options by `parse`; any other source as it is.
    ///
    /// # Errors
    /// What `parse` answers.
    pub fn parse_url(self, parse: impl FnOnce(&str) -> crate::Result<O>) -> crate::Result<Self> {
        match self {
            Source::Url(url) => Ok(Source::Options(Box::new(parse(&url)?))),
            other => Ok(other),
        }
    }
}

/// The error of a builder given no [`Source`] (or a URL it never parsed).
pub fn no_source() -> LockError {
    LockError::InvalidConfig { reason: "no url, connect options or pool given".into() }
}

/// One direct connection, `connect`, answered within `timeout`. A builder makes it before its
/// pool: it fails at once with the server's or the network's own words (through `classify`),
/// where a pool retries a refused connection until its acquire timeout and then says only
/// "pool timed out"; silence is a temporary error.
///
/// # Errors
/// As above.
pub async fn connect_first<C, E>(
    backend: &'static str,
    timeout: Duration,
    connect: impl Future<Output = Result<C, E>>,
    classify: impl FnOnce(E) -> LockError,
) -> crate::Result<C> {
    match tokio::time::timeout(timeout, connect).await {
        Ok(Ok(c)) => Ok(c),
        Ok(Err(e)) => Err(classify(e)),
        Err(_) => Err(LockError::temporary(backend, format!("no answer from the server within {timeout:?}"))),
    }
}

/// The server's address as a lock space names it: the socket path, or `host:port` with the
/// host in lowercase (host names compare case-insensitively; user and password are not part of
/// the space).
pub fn endpoint(socket: Option<&Path>, host: &str, port: u16) -> String {
    match socket {
        Some(sock) => sock.display().to_string(),
        None => format!("{}:{port}", host.to_ascii_lowercase()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_never_show_a_password() {
        let s: Source<String, ()> = Source::Url("mysql://u:hunter2@h/db".into());
        assert_eq!(format!("{s:?}"), "\"mysql://u:***@h/db\"");
        let s: Source<String, ()> = Source::Options(Box::new("hunter2".into()));
        assert_eq!(format!("{s:?}"), "\"connect options\"");
        let s = Source::<String, ()>::Url("x".into()).parse_url(|u| Ok(format!("{u}!"))).expect("parse");
        assert!(matches!(s, Source::Options(o) if *o == "x!"));
        assert_eq!(endpoint(None, "DB.Example", 3306), "db.example:3306");
        assert_eq!(endpoint(Some(Path::new("/run/s.sock")), "h", 1), "/run/s.sock");
    }

    #[tokio::test(start_paused = true)]
    async fn a_silent_server_is_temporary() {
        let never = std::future::pending::<Result<(), String>>();
        let e = connect_first("x", Duration::from_secs(1), never, |e| LockError::permanent("x", e));
        let e = e.await.expect_err("silent");
        assert!(e.is_temporary() && e.to_string().contains("within 1s"), "{e}");
        let refused = async { Err::<(), _>("refused".to_owned()) };
        let e = connect_first("x", Duration::from_secs(1), refused, |e| LockError::permanent("x", e)).await;
        assert!(!e.expect_err("refused").is_temporary());
    }
}
