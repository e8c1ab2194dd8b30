//! How `dlock` reports a failure: the exit status of each kind of error (sysexits.h), the
//! message on stderr, and, for a command given `--json`, the same error as one JSON object on
//! stdout, so that a script reading stdout never has to parse stderr.

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use dlock::{LockError, redact_url};
use serde_json::json;

use crate::{EXIT_CONFIG, EXIT_LOST, EXIT_NOPERM, EXIT_TIMEOUT, EXIT_UNAVAILABLE, EXIT_UNSUPPORTED};

/// Whether this process answers in JSON (`--json`): set once, before anything can fail.
static JSON: AtomicBool = AtomicBool::new(false);

/// Errors are also printed as JSON on stdout from now on.
pub fn json_errors() {
    JSON.store(true, Ordering::Relaxed);
}

/// The exit status of `e`.
pub fn status_of(e: &LockError) -> u8 {
    match e {
        LockError::Timeout { .. } => EXIT_TIMEOUT,
        // Retrying cannot help a permanent refusal (a database that does not exist, a Redis
        // database number out of range, TLS to a server without it): the configuration is
        // wrong, not the server away.
        LockError::Backend { temporary: false, .. } => EXIT_UNSUPPORTED,
        LockError::Backend { .. } => EXIT_UNAVAILABLE,
        LockError::Unsupported { .. } => EXIT_UNSUPPORTED,
        LockError::PermissionDenied { .. } => EXIT_NOPERM,
        // Granted, then lost before the command could start (the holder's note, the top-up
        // renewal of a hand-over): the lock's status, not a usage error.
        LockError::LeaseLost { .. } => EXIT_LOST,
        _ => EXIT_CONFIG,
    }
}

/// The short name of `e`'s kind, for JSON.
fn kind_of(code: u8) -> &'static str {
    match code {
        EXIT_TIMEOUT => "timeout",
        EXIT_UNAVAILABLE => "unavailable",
        EXIT_UNSUPPORTED => "config",
        EXIT_NOPERM => "permission",
        EXIT_LOST => "lost",
        _ => "usage",
    }
}

/// Report `e` about the store at `url` (its password redacted) and return its exit status.
pub fn fail(url: &str, e: &LockError) -> ExitCode {
    let mut msg = e.to_string();
    let mut src = std::error::Error::source(e);
    while let Some(s) = src {
        // Drivers often repeat their source's text in their own message: print it once.
        let text = s.to_string();
        if !msg.contains(&text) {
            msg.push_str(&format!(": {text}"));
        }
        src = s.source();
    }
    let code = status_of(e);
    refuse(code, &format!("{msg} (url {})", redact_url(url)))
}

/// Report `message` and return the exit status `code`: on stderr, and on stdout as JSON
/// under `--json`.
pub fn refuse(code: u8, message: &str) -> ExitCode {
    eprintln!("dlock: {message}");
    if JSON.load(Ordering::Relaxed) {
        println!("{}", json!({ "error": { "status": code, "kind": kind_of(code), "message": message } }));
    }
    ExitCode::from(code)
}

/// The error for a server that did not answer the connection within `within` (as typed).
pub fn unreachable(within: &str) -> LockError {
    LockError::temporary("dlock", format!("no connection to the server within {within}"))
}

/// [`unreachable()`] for a fixed bound of the command's own.
pub fn unreachable_for(d: Duration) -> LockError {
    unreachable(&format!("{}ms", d.as_millis()))
}
