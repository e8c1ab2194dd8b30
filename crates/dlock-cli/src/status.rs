//! `dlock status`: what the backend can tell about a lock, a read-write lock or a semaphore,
//! without acquiring or waiting.

use std::process::ExitCode;
use std::time::Duration;

use dlock::backend::LockInfo;
use dlock::{DynBackend, LeaderElection, Locker, RwLock, Semaphore};
use serde_json::{Value, json};

use crate::run::{fail, unreachable};

/// How long `dlock status` waits for a connection.
const STATUS_CONNECT: Duration = Duration::from_secs(5);

/// What KEY names.
#[derive(Clone, Copy, Debug)]
pub enum Kind {
    /// A mutex (with `leader`: also the leader identity published under it).
    Mutex { leader: bool },
    /// A read-write lock with this many reader slots (used only where it is not native).
    ReadWrite { reader_slots: u32 },
    /// A semaphore of this many permits.
    Permits(u32),
}

/// Print what the backend can tell about `key`: held or free, the remaining lease, the fencing
/// token, the waiters and the holder where recorded; for a read-write lock the writer or the
/// readers, for a semaphore every held permit. Exit 0 when an acquisition would not wait (the
/// key free, a permit free), 1 when it would.
pub async fn status(url: &str, key: &str, kind: Kind, json: bool) -> ExitCode {
    let backend = match connect(url, Some(key)).await {
        Ok(b) => b,
        Err(code) => return code,
    };
    let shown = match kind {
        Kind::Mutex { leader } => mutex(&backend, key, leader).await,
        Kind::ReadWrite { reader_slots } => read_write(&backend, key, reader_slots).await,
        Kind::Permits(n) => permits(&backend, key, n).await,
    };
    match shown {
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
        Err(e) => fail(url, &e),
    }
}

/// The backend of `url`, within [`STATUS_CONNECT`], for a command about `key` (checked first,
/// when there is one); the exit status of the failure otherwise.
pub(crate) async fn connect(url: &str, key: Option<&str>) -> Result<DynBackend, ExitCode> {
    let backend = match tokio::time::timeout(STATUS_CONNECT, dlock::from_url(url)).await {
        Ok(Ok(b)) => b,
        Ok(Err(e)) => return Err(fail(url, &e)),
        Err(_) => return Err(fail(url, &unreachable(STATUS_CONNECT))),
    };
    if let Some(key) = key {
        dlock::validate_key(key).map_err(|e| fail(url, &e))?;
    }
    Ok(backend)
}

/// One status: whether an acquisition would wait, the line (before and after the backend's
/// name), the JSON fields.
struct Shown {
    busy: bool,
    text: (String, String),
    value: Value,
}

fn readers(n: usize) -> String {
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
    if !info.held || info.readers.is_some() || !backend.capabilities().notes {
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
    Ok(Shown { busy: info.held, text, value })
}

/// The gate tells a native lock's readers or writer; a composite's readers hold slots.
async fn read_write(backend: &DynBackend, key: &str, reader_slots: u32) -> dlock::Result<Shown> {
    let rw = RwLock::new(&Locker::new(backend.clone()), key)?.with_reader_slots(reader_slots)?;
    let gate = backend.inspect(rw.gate_key()).await?;
    let mut readers = gate.readers.unwrap_or(0);
    if !rw.is_native() {
        for slot in 0..rw.reader_slots() {
            readers += usize::from(backend.inspect(&rw.reader_slot_key(slot)).await?.held);
        }
    }
    let writer = gate.held && gate.readers.is_none();
    let holder = noted(backend, rw.gate_key(), &gate).await?;
    let text = match (writer, readers) {
        (true, _) => {
            ("read-write lock held by a writer".to_owned(), with_holder(described(&gate), holder.clone()).0.1)
        }
        (false, 0) => ("read-write lock free".to_owned(), String::new()),
        (false, n) => (format!("read-write lock {}", self::readers(n)), String::new()),
    };
    let value = json!({
        "kind": "read-write",
        "native": rw.is_native(),
        "writer": writer,
        "readers": readers,
        "fence": gate.fence.filter(|_| writer).map(|f| f.0),
        "holder": holder,
        "waiters": gate.waiters,
    });
    Ok(Shown { busy: writer || readers > 0, text, value })
}

/// Every held permit of the semaphore and who holds it where the store records it: the slot
/// keys' holds, or, where the store keeps the permits itself, its list of them.
async fn permits(backend: &DynBackend, key: &str, n: u32) -> dlock::Result<Shown> {
    let sem = Semaphore::new(&Locker::new(backend.clone()), key, n)?;
    let mut held: Vec<(u32, LockInfo, Option<String>)> = Vec::new();
    if sem.is_native() {
        for p in backend.inspect(&sem.pool_key()).await?.permits {
            let mut info = LockInfo::held();
            (info.remaining, info.fence, info.owner) = (p.remaining, Some(p.fence), Some(p.owner));
            held.push((p.slot, info, p.holder));
        }
    } else {
        for slot in 0..n {
            let k = sem.slot_key(slot);
            let info = backend.inspect(&k).await?;
            if info.held {
                let holder = noted(backend, &k, &info).await?;
                held.push((slot, info, holder));
            }
        }
    }
    let count = held.len();
    let mut tail = String::new();
    let mut slots = Vec::with_capacity(count);
    for (slot, info, holder) in held {
        let ((head, rest), mut v) = with_holder(described(&info), holder);
        tail.push_str(&format!("; slot {slot} {head}{rest}"));
        v["slot"] = json!(slot);
        slots.push(v);
    }
    let text = (format!("semaphore, {count} of {n} permits held"), tail);
    let value = json!({
        "kind": "semaphore",
        "native": sem.is_native(),
        "permits": n,
        "held_permits": count,
        "slots": slots,
    });
    Ok(Shown { busy: count >= n as usize, text, value })
}
