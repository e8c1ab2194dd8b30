//! `dlock status`: what the backend can tell about a lock, a read-write lock or a semaphore,
//! without acquiring or waiting.

use std::process::ExitCode;
use std::time::Duration;

use dlock::backend::LockInfo;
use dlock::{DynBackend, LeaderElection, LockError, Locker, RwLock, Semaphore};
use serde_json::{Value, json};

use crate::EXIT_CONFIG;
use crate::run::{fail, unreachable};
use kinds::Found;
use primitives::{see_permits, see_rw};

pub(crate) mod kinds;
pub(crate) mod primitives;

/// How long `dlock status` waits for a connection.
const STATUS_CONNECT: Duration = Duration::from_secs(5);

/// What KEY names (`Mutex { leader: false }`, no flag given: whatever the store shows).
#[derive(Clone, Copy, Debug)]
pub enum Kind {
    /// A mutex (with `leader`: also the leader identity published under it).
    Mutex { leader: bool },
    /// A read-write lock with this many reader slots (used only where it is not native).
    ReadWrite { reader_slots: u32 },
    /// A semaphore of this many permits.
    Permits(u32),
    /// What the store was found to hold under KEY (`list`: the kind its keys tell).
    Found(Found),
}

/// Print what the backend can tell about `key`: held or free, the remaining lease, the fencing
/// token, the waiters and the holder where recorded; for a read-write lock the writer or the
/// readers, for a semaphore every held permit. Without `--leader`, `--read-write` or
/// `--permits` (`Kind::Mutex { leader: false }`), what the store holds or stores under the
/// name says which it is (see `kinds.rs`). Exit 0 when an acquisition would not wait (the key
/// free, a permit free), 1 when it would.
pub async fn status(url: &str, key: &str, kind: Kind, json: bool) -> ExitCode {
    let named = match kind {
        Kind::Permits(_) => Semaphore::validate_name(key),
        Kind::ReadWrite { .. } => RwLock::validate_name(key),
        Kind::Mutex { .. } | Kind::Found(_) => dlock::validate_key(key),
    };
    if let Err(e) = named {
        return fail(url, &e);
    }
    let backend = match connect(url, Some(key)).await {
        Ok(b) => b,
        Err(code) => return code,
    };
    match shown(&backend, key, kind).await {
        Ok(Shown { busy, text: (head, tail), value }) => {
            if json {
                let mut v = json!({ "key": key, "backend": backend.name() });
                if let (Value::Object(m), Value::Object(extra)) = (&mut v, value) {
                    m.extend(extra);
                }
                println!("{v}");
            } else {
                println!("{key}: {head} ({}){tail}", backend.name());
            }
            if busy { ExitCode::from(1) } else { ExitCode::SUCCESS }
        }
        Err(LockError::PermitsMismatch { stored, asked, .. }) => {
            let why = format!(
                "{key} is a semaphore of {stored} permits (stored with it), not {asked}: `dlock run --permits \
                 {asked}` would be refused as well; give --permits {stored}, or no --permits"
            );
            crate::report::refuse(EXIT_CONFIG, &why)
        }
        Err(e) => fail(url, &e),
    }
}

/// What `status` (and `list`) shows of `key` as `kind`.
pub(crate) async fn shown(backend: &DynBackend, key: &str, kind: Kind) -> dlock::Result<Shown> {
    let kind = match kind {
        Kind::Mutex { leader: false } => Kind::Found(kinds::find(backend, key).await?),
        other => other,
    };
    match kind {
        Kind::Mutex { leader } => mutex(backend, key, leader).await,
        Kind::Found(found) => match found {
            Found::Mutex => mutex(backend, key, false).await,
            Found::Semaphore(n) => Ok(see_permits(backend, key, n).await?.shown()),
            Found::ReadWrite(k) => Ok(see_rw(backend, key, k).await?.shown()),
            Found::Nothing => {
                let mut shown = mutex(backend, key, false).await?;
                if let Some(why) = kinds::untold(backend) {
                    shown.text.1.push_str(&format!("; {why}"));
                    shown.value["untold"] = json!(why);
                }
                Ok(shown)
            }
        },
        Kind::ReadWrite { reader_slots } => Ok(see_rw(backend, key, reader_slots).await?.shown()),
        Kind::Permits(n) => Ok(see_permits(backend, key, Some(n)).await?.shown()),
    }
}

/// The backend of `url`, within [`STATUS_CONNECT`], for a command about `key` (checked first,
/// when there is one, so that bad input is told apart from a store that is down); the exit
/// status of the failure otherwise.
pub(crate) async fn connect(url: &str, key: Option<&str>) -> Result<DynBackend, ExitCode> {
    if let Some(key) = key {
        dlock::validate_key(key).map_err(|e| fail(url, &e))?;
    }
    match tokio::time::timeout(STATUS_CONNECT, dlock::from_url(url)).await {
        Ok(Ok(b)) => Ok(b),
        Ok(Err(e)) => Err(fail(url, &e)),
        Err(_) => Err(fail(url, &unreachable(STATUS_CONNECT))),
    }
}

/// One status: whether an acquisition would wait, the line (before and after the backend's
/// name), the JSON fields.
pub(crate) struct Shown {
    pub busy: bool,
    pub text: (String, String),
    pub value: Value,
}

pub(crate) fn readers(n: usize) -> String {
    format!("held by {n} reader{}", if n == 1 { "" } else { "s" })
}

/// The fields of one inspected key, and its description: the state, and the details.
pub(crate) fn described(info: &LockInfo) -> ((String, String), Value) {
    let head = match info.readers {
        Some(n) => readers(n),
        None if info.held => "held".to_owned(),
        None => "free".to_owned(),
    };
    let mut line = String::new();
    if info.held && info.readers.is_none() {
        match info.remaining {
            Some(d) => line.push_str(&format!(", remaining lease {d:?}")),
            None => line.push_str(", lease bound to the holder's session"),
        }
        if let Some(f) = info.fence {
            line.push_str(&format!(", fence {f}"));
        }
        if let Some(o) = &info.owner {
            line.push_str(&format!(", holder {o}"));
        }
    }
    if let Some(w) = info.waiters.filter(|_| info.held) {
        line.push_str(&format!(", {w} waiting"));
    }
    let value = json!({
        "held": info.held,
        "remaining_ms": info.remaining.map(|d| d.as_millis() as u64),
        "fence": info.fence.map(|f| f.0),
        "waiters": info.waiters,
        "owner": info.owner,
        "readers": info.readers,
    });
    ((head, line), value)
}

/// The identity the holder of `key` noted (`dlock run`, `Locker::with_holder`), where the store
/// keeps notes and the key is held exclusively.
pub(crate) async fn noted(backend: &DynBackend, key: &str, info: &LockInfo) -> dlock::Result<Option<String>> {
    if !info.held || info.readers.is_some() || backend.notes().is_none() {
        return Ok(None);
    }
    backend.note(key).await
}

/// Adds the holder's identity to a description.
pub(crate) fn with_holder(
    ((head, mut line), mut value): ((String, String), Value),
    holder: Option<String>,
) -> ((String, String), Value) {
    if let Some(h) = &holder {
        line.push_str(&format!(", by {h}"));
    }
    value["holder"] = json!(holder);
    ((head, line), value)
}

async fn mutex(backend: &DynBackend, key: &str, leader: bool) -> dlock::Result<Shown> {
    let info = backend.inspect(key).await?;
    let (mut text, mut value) = with_holder(described(&info), noted(backend, key, &info).await?);
    if leader {
        let id = LeaderElection::new(&Locker::new(backend.clone()), key, "")?.leader().await?;
        if let Some(id) = &id {
            text.1.push_str(&format!(", leader {id}"));
        }
        value["leader"] = json!(id);
    }
    value["kind"] = json!(if info.held || leader { Some("mutex") } else { None });
    Ok(Shown { busy: info.held, text, value })
}
