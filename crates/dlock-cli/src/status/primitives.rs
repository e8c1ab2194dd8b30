//! A semaphore's permits and a read-write lock's writer and readers as the store shows them,
//! with the holders' identities where the store records them: what `status` and `list` print
//! and what `unlock` names the hold to take by.

use dlock::backend::LockInfo;
use dlock::{DEFAULT_READER_SLOTS, DynBackend, LockError, Locker, RwLock, Semaphore};
use serde_json::{Value, json};

use super::kinds::{inspect_all, readable, stored_slots};
use crate::status::{Shown, described, noted, readers, with_holder};

/// One held part of a primitive: its slot, its key, what the store shows, the identity noted.
#[derive(Debug)]
pub struct Part {
    pub slot: u32,
    pub key: String,
    pub info: LockInfo,
    pub holder: Option<String>,
}

impl Part {
    /// As `status` shows a held key, after the slot.
    fn shown(&self, what: &str) -> (String, Value) {
        let ((head, rest), mut v) = with_holder(described(&self.info), self.holder.clone());
        v["slot"] = json!(self.slot);
        (format!("; {what} {} {head}{rest}", self.slot), v)
    }
}

/// The held permits of a semaphore.
#[derive(Debug)]
pub struct SemSeen {
    pub native: bool,
    /// The count looked at: given, or as stored.
    pub permits: Option<u32>,
    pub held: Vec<Part>,
}

/// Every held permit of the semaphore `key` of `permits` (`None`: as stored), after checking
/// a count given against the one stored with it.
///
/// # Errors
/// [`LockError::PermitsMismatch`] when `permits` disagrees with the stored count (as `dlock run
/// --permits` would be refused); backend errors.
pub async fn see_permits(backend: &DynBackend, key: &str, permits: Option<u32>) -> dlock::Result<SemSeen> {
    // The handle's own count matters only for the slot keys, looked at below with the count known.
    let sem = Semaphore::new(&Locker::new(backend.clone()), key, permits.unwrap_or(1))?;
    let stored = readable(sem.stored_permits().await)?;
    let permits = match (permits, stored) {
        (Some(asked), Some(stored)) if stored != u64::from(asked) => {
            return Err(LockError::PermitsMismatch { name: key.to_owned(), stored, asked });
        }
        (Some(asked), _) => Some(asked),
        (None, stored) => stored.and_then(|n| u32::try_from(n).ok()),
    };
    let mut held = Vec::new();
    if sem.is_native() {
        let pool = sem.pool_key();
        for p in backend.inspect(&pool).await?.permits {
            let mut info = LockInfo::held();
            (info.remaining, info.fence, info.owner) = (p.remaining, Some(p.fence), Some(p.owner));
            held.push(Part { slot: p.slot, key: pool.clone(), info, holder: p.holder });
        }
    } else if let Some(n) = permits {
        let keys: Vec<String> = (0..n).map(|s| sem.slot_key(s)).collect();
        for (slot, (key, info)) in keys.clone().into_iter().zip(inspect_all(backend, keys).await?).enumerate()
        {
            if info.held {
                let holder = noted(backend, &key, &info).await?;
                held.push(Part { slot: slot as u32, key, info, holder });
            }
        }
    }
    Ok(SemSeen { native: sem.is_native(), permits, held })
}

impl SemSeen {
    pub fn shown(&self) -> Shown {
        let count = self.held.len();
        let mut tail = String::new();
        let mut slots = Vec::with_capacity(count);
        for part in &self.held {
            let (text, v) = part.shown("slot");
            tail.push_str(&text);
            slots.push(v);
        }
        let head = match self.permits {
            Some(n) => format!("semaphore, {count} of {n} permits held"),
            None if self.native => {
                format!(
                    "semaphore, {count} permits held (no count stored with it: give --permits N to check it)"
                )
            }
            None => "semaphore, its count not stored: give --permits N to see its permits".to_owned(),
        };
        let value = json!({
            "kind": "semaphore",
            "native": self.native,
            "permits": self.permits,
            "held_permits": count,
            "slots": slots,
        });
        let busy = self.permits.is_some_and(|n| count >= n as usize);
        Shown { busy, text: (head, tail), value }
    }
}

/// Who holds a read-write lock.
#[derive(Debug)]
pub struct RwSeen {
    pub native: bool,
    pub gate_key: String,
    /// The gate: the writer's (holding, or waiting for the readers to leave); natively also the
    /// readers' shared hold.
    pub gate: LockInfo,
    /// The identity the gate's holder noted.
    pub writer_note: Option<String>,
    /// A writer holds the gate and every reader slot (natively: the gate, exclusively).
    pub writer_holds: bool,
    /// A writer holds the gate but not yet every slot: it waits for the readers.
    pub writer_waits: bool,
    /// How many readers hold the lock.
    pub readers: usize,
    /// The readers' slot holds (composite only: native readers are shared holds of the gate,
    /// neither fenced nor noted).
    pub reader_parts: Vec<Part>,
    /// The writer's slot holds (composite only).
    pub writer_parts: Vec<Part>,
    /// The reader slots looked at (composite only).
    pub reader_slots: u32,
}

/// The writer and readers of the read-write lock `key`: natively the gate alone; else the
/// gate and its reader slots (as stored with the lock, else `reader_slots`), each slot told a
/// writer's or a reader's by the identity noted on it (a writer notes its identity on the
/// gate and on every slot it takes).
///
/// # Errors
/// [`LockError::InvalidConfig`] when `reader_slots`, other than the default, disagrees with the
/// number stored (as `dlock run --reader-slots` would be refused); backend errors.
pub async fn see_rw(backend: &DynBackend, key: &str, reader_slots: u32) -> dlock::Result<RwSeen> {
    let rw = RwLock::new(&Locker::new(backend.clone()), key)?;
    let stored = stored_slots(backend, &rw).await?;
    let reader_slots = match stored {
        Some(k) if reader_slots != k && reader_slots != DEFAULT_READER_SLOTS => {
            return Err(LockError::InvalidConfig {
                reason: format!(
                    "read-write lock {key:?} has {k} reader slots stored with it, not {reader_slots}"
                ),
            });
        }
        Some(k) => k,
        None => reader_slots,
    };
    let rw = rw.with_reader_slots(reader_slots)?;
    let gate_key = rw.gate_key().to_owned();
    let gate = backend.inspect(&gate_key).await?;
    let writer_note = noted(backend, &gate_key, &gate).await?;
    let exclusive = gate.held && gate.readers.is_none();
    let mut seen = RwSeen {
        native: rw.is_native(),
        gate_key,
        gate,
        writer_note,
        writer_holds: false,
        writer_waits: false,
        readers: 0,
        reader_parts: Vec::new(),
        writer_parts: Vec::new(),
        reader_slots,
    };
    if seen.native {
        seen.writer_holds = exclusive;
        seen.readers = seen.gate.readers.unwrap_or(0);
        return Ok(seen);
    }
    let keys: Vec<String> = (0..rw.reader_slots()).map(|s| rw.reader_slot_key(s)).collect();
    for (slot, (key, info)) in keys.clone().into_iter().zip(inspect_all(backend, keys).await?).enumerate() {
        if !info.held {
            continue;
        }
        let holder = noted(backend, &key, &info).await?;
        let part = Part { slot: slot as u32, key, info, holder };
        // With the gate held, a slot is the writer's when it bears the writer's note, or none:
        // a slot is noted just after it is taken, and a reader's slot taken while a writer
        // waits is given back at once; where nothing is noted, every slot counts as the writer's.
        let writers = exclusive && (part.holder.is_none() || part.holder == seen.writer_note);
        if writers { seen.writer_parts.push(part) } else { seen.reader_parts.push(part) }
    }
    seen.readers = seen.reader_parts.len();
    seen.writer_holds = exclusive && seen.writer_parts.len() == rw.reader_slots() as usize;
    seen.writer_waits = exclusive && !seen.writer_holds;
    Ok(seen)
}

impl RwSeen {
    pub fn shown(&self) -> Shown {
        let writer = described(&self.gate).0.1;
        let writer = with_holder(((String::new(), writer), Value::Null), self.writer_note.clone()).0.1;
        let mut tail = String::new();
        let head = if self.writer_holds {
            tail.push_str(&writer);
            "read-write lock held by a writer".to_owned()
        } else {
            if let Some(w) = self.gate.waiters.filter(|&w| w > 0) {
                tail.push_str(&format!(", {w} waiting"));
            }
            match self.readers {
                0 if !self.writer_waits => "read-write lock free".to_owned(),
                // Without notes a writer's slots and the readers' look alike.
                0 => "read-write lock held by readers the store does not tell apart from the writer's slots"
                    .to_owned(),
                n => format!("read-write lock {}", readers(n)),
            }
        };
        if self.writer_waits {
            tail.push_str(&format!("; a writer waits for them{writer}"));
        }
        let mut reader_holds = Vec::new();
        for part in &self.reader_parts {
            let (text, v) = part.shown("reader slot");
            tail.push_str(&text);
            reader_holds.push(v);
        }
        let fence = self.gate.fence.filter(|_| self.writer_holds || self.writer_waits).map(|f| f.0);
        let value = json!({
            "kind": "read-write",
            "native": self.native,
            "writer": self.writer_holds,
            "writer_waiting": self.writer_waits,
            "readers": self.readers,
            "reader_slots": (!self.native).then_some(self.reader_slots),
            "reader_holds": reader_holds,
            "fence": fence,
            "holder": self.writer_note,
            "waiters": self.gate.waiters,
        });
        let busy = self.writer_holds || self.writer_waits || self.readers > 0;
        Shown { busy, text: (head, tail), value }
    }
}
