//! The statements, loaded from `sql/*.sql` with the validated table name filled in.

use std::sync::Arc;

/// The statements, with the validated table name filled in.
#[derive(Debug)]
pub(crate) struct Sql {
    /// Exclusive grants bump the name's fence counter (the builder's `fencing`).
    pub(crate) fenced: bool,
    pub(crate) schema: String,
    /// The note columns for a fence table of an older version.
    pub(crate) notes_schema: String,
    pub(crate) try_lock: String,
    pub(crate) lock_wait: String,
    /// The same for a shared hold (the read side of a read-write lock).
    pub(crate) try_lock_shared: String,
    pub(crate) lock_wait_shared: String,
    pub(crate) inspect: String,
    /// Force-unlock (`evict.rs`).
    pub(crate) evict_fence: String,
    pub(crate) evict_holder: String,
    /// The fence of a lock in the caller's transaction (`xact.rs`).
    pub(crate) xact_fence: String,
    pub(crate) notes_read: String,
    /// Shared with the keepers.
    pub(crate) notes_set: Arc<str>,
    pub(crate) unlock_noted: Arc<str>,
    /// Records (`records.rs`).
    pub(crate) records_schema: String,
    pub(crate) record_init: String,
    pub(crate) record_set: String,
    pub(crate) record_mark: String,
    pub(crate) record_delete: String,
    pub(crate) record_read: String,
}

impl Sql {
    pub(crate) fn new(table: &str, fenced: bool) -> Self {
        let render = |s: &str| s.replace("{table}", table);
        let (try_lock, lock_wait) = match fenced {
            true => (include_str!("../sql/try_lock.sql"), include_str!("../sql/lock_wait.sql")),
            false => {
                (include_str!("../sql/try_lock_unfenced.sql"), include_str!("../sql/lock_wait_unfenced.sql"))
            }
        };
        Sql {
            fenced,
            schema: render(include_str!("../sql/schema.sql")),
            try_lock: render(try_lock),
            lock_wait: render(lock_wait),
            try_lock_shared: render(include_str!("../sql/try_lock_shared.sql")),
            lock_wait_shared: render(include_str!("../sql/lock_wait_shared.sql")),
            inspect: render(include_str!("../sql/inspect.sql")),
            evict_fence: render(include_str!("../sql/evict_fence.sql")),
            evict_holder: render(include_str!("../sql/evict_holder.sql")),
            xact_fence: render(include_str!("../sql/xact_fence.sql")),
            notes_schema: render(include_str!("../sql/notes_schema.sql")),
            notes_read: render(include_str!("../sql/notes_read.sql")),
            notes_set: render(include_str!("../sql/notes_set.sql")).into(),
            unlock_noted: render(include_str!("../sql/unlock_noted.sql")).into(),
            records_schema: render(include_str!("../sql/records_schema.sql")),
            record_init: render(include_str!("../sql/record_init.sql")),
            record_set: render(include_str!("../sql/record_set.sql")),
            record_mark: render(include_str!("../sql/record_mark.sql")),
            record_delete: render(include_str!("../sql/record_delete.sql")),
            record_read: render(include_str!("../sql/record_read.sql")),
        }
    }
}
