//! What a name stands for in the store, told from the store alone so that `status`, `list`
//! and `unlock` need no flag: a mutex, a semaphore (its stored permit count, its pool or slot
//! keys) or a read-write lock (its gate, its reader slots); and the user's name behind each
//! internal key a store lists (`job#sp`, `job#s0`, `job#rw-gate` are all `job`).

use dlock::backend::{LockInfo, RecordOp};
use dlock::{DEFAULT_READER_SLOTS, DynBackend, LockError, Locker, RwLock, Semaphore};

/// What the store shows under a name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Found {
    /// The mutex of that name is held.
    Mutex,
    /// A semaphore: its permit count as stored, `None` where none is (a store without
    /// records, a semaphore taken by another library).
    Semaphore(Option<u32>),
    /// A read-write lock with this many reader slots looked at (where it is not native).
    ReadWrite(u32),
    /// Nothing held, and nothing stored, under the name: free, whatever it is.
    Nothing,
}

/// Reserved suffixes of the keys a primitive derives from its name, and what each tells:
/// what `list` strips to show the user's name.
const DERIVED: [(&str, Found); 6] = [
    ("#rw-gate", Found::ReadWrite(DEFAULT_READER_SLOTS)),
    ("#rw-up", Found::ReadWrite(DEFAULT_READER_SLOTS)),
    ("#s-n", Found::Semaphore(None)),
    ("#s-m", Found::Semaphore(None)),
    ("#sp", Found::Semaphore(None)),
    ("#latch", Found::Nothing),
];
/// Suffixes followed by a slot number.
const NUMBERED: [(&str, Found); 2] =
    [("#rw-r", Found::ReadWrite(DEFAULT_READER_SLOTS)), ("#s", Found::Semaphore(None))];

/// The name a user gave for an internal `key` (the key itself when it derives from none), and
/// the primitive the key belongs to: a mutex for a key of its own; `Nothing` where the key
/// tells none (a latch's).
pub fn user_name(key: &str) -> (&str, Found) {
    for (suffix, kind) in DERIVED {
        if let Some(name) = key.strip_suffix(suffix).filter(|n| !n.is_empty()) {
            return (name, kind);
        }
    }
    for (suffix, kind) in NUMBERED {
        if let Some((name, digits)) = key.rsplit_once(suffix)
            && !name.is_empty()
            && !digits.is_empty()
            && digits.len() <= 3
            && digits.bytes().all(|b| b.is_ascii_digit())
        {
            return (name, kind);
        }
    }
    (key, Found::Mutex)
}

/// What `key` is, by looking at every key a primitive of that name would use: the mutex
/// first, then a semaphore's stored count and pool, then a read-write lock's stored number of
/// reader slots, its gate and (where it is not native) its first [`DEFAULT_READER_SLOTS`]
/// reader slots (a lock taken before its count was stored, or on a store without records).
///
/// # Errors
/// Backend errors (`Unsupported` where the store cannot inspect a lock without taking it).
pub async fn find(backend: &DynBackend, key: &str) -> dlock::Result<Found> {
    if backend.inspect(key).await?.held {
        return Ok(Found::Mutex);
    }
    let locker = Locker::new(backend.clone());
    if Semaphore::validate_name(key).is_ok() {
        let sem = Semaphore::new(&locker, key, 1)?;
        if let Some(n) = readable(sem.stored_permits().await)? {
            // A count the library never stores reads as unknown rather than as a wrong one.
            return Ok(Found::Semaphore(u32::try_from(n).ok()));
        }
        if sem.is_native() && backend.inspect(&sem.pool_key()).await?.held {
            return Ok(Found::Semaphore(None));
        }
    }
    if RwLock::validate_name(key).is_ok() {
        let rw = RwLock::new(&locker, key)?;
        if let Some(k) = stored_slots(backend, &rw).await? {
            return Ok(Found::ReadWrite(k));
        }
        let gate = backend.inspect(rw.gate_key()).await?;
        if gate.held || gate.waiters.is_some_and(|w| w > 0) {
            return Ok(Found::ReadWrite(DEFAULT_READER_SLOTS));
        }
        if !rw.is_native() {
            let keys: Vec<String> = (0..rw.reader_slots()).map(|s| rw.reader_slot_key(s)).collect();
            if inspect_all(backend, keys).await?.iter().any(|i| i.held) {
                return Ok(Found::ReadWrite(DEFAULT_READER_SLOTS));
            }
        }
    }
    Ok(Found::Nothing)
}

/// The number of reader slots stored with the read-write lock `rw` by its first holder, where
/// the store keeps records.
///
/// # Errors
/// Backend errors.
pub async fn stored_slots(backend: &DynBackend, rw: &RwLock) -> dlock::Result<Option<u32>> {
    if backend.records().is_none() {
        return Ok(None);
    }
    let stored = readable(backend.record(&rw.slots_key(), RecordOp::Get).await.map(|r| r.value))?;
    Ok(stored.and_then(|k| u32::try_from(k).ok()))
}

/// A stored count as read, or none where this role may not read the records (a PostgreSQL
/// role without a grant on them): the locks themselves may still be looked at.
pub fn readable<T>(read: dlock::Result<Option<T>>) -> dlock::Result<Option<T>> {
    match read {
        Err(LockError::PermissionDenied { .. }) => Ok(None),
        other => other,
    }
}

/// Every key of `keys` inspected at once (a composite's parts: one round trip of time, not
/// one per part), in the order given.
pub async fn inspect_all(backend: &DynBackend, keys: Vec<String>) -> dlock::Result<Vec<LockInfo>> {
    let mut set = tokio::task::JoinSet::new();
    for (i, key) in keys.into_iter().enumerate() {
        let backend = backend.clone();
        set.spawn(async move { (i, backend.inspect(&key).await) });
    }
    let mut infos = vec![LockInfo::free(); set.len()];
    while let Some(done) = set.join_next().await {
        let (i, info) = done.map_err(|e| dlock::LockError::temporary("dlock", format!("inspection: {e}")))?;
        infos[i] = info?;
    }
    Ok(infos)
}

/// What could not be told about a free name on this store, for the operator.
pub fn untold(backend: &DynBackend) -> Option<&'static str> {
    backend.records().is_none().then_some(
        "this store keeps no record of a semaphore's count: look at one with --permits N, and at a \
         read-write lock of more than 16 reader slots with --read-write --reader-slots K",
    )
}

#[cfg(test)]
mod tests {
    use super::{DEFAULT_READER_SLOTS, Found, user_name};

    #[test]
    fn internal_keys_show_their_users_name() {
        for (key, name) in [
            ("job", "job"),
            ("p-sem#sp", "p-sem"),
            ("p-sem#s0", "p-sem"),
            ("p-sem#s255", "p-sem"),
            ("p-sem#s-n", "p-sem"),
            ("p-sem#s-m", "p-sem"),
            ("cfg#rw-gate", "cfg"),
            ("cfg#rw-up", "cfg"),
            ("cfg#rw-r15", "cfg"),
            ("a#b#s3", "a#b"),
            ("#s0", "#s0"),
            ("job#s", "job#s"),
            ("job#sx", "job#sx"),
            ("job#s1234", "job#s1234"),
        ] {
            let kind = user_name(key).1;
            let expected = if name == key {
                Found::Mutex
            } else if key.contains("#rw-") {
                Found::ReadWrite(DEFAULT_READER_SLOTS)
            } else {
                Found::Semaphore(None)
            };
            assert_eq!(kind, expected, "{key}");
            assert_eq!(user_name(key).0, name, "{key}");
        }
    }
}
