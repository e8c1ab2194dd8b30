//! The statements, loaded from `sql/*.sql` with the validated table name filled in.

use std::sync::Arc;

/// How a grant draws its fence: flushed to disk each time, or on the epoch.
const FLUSHED: &str = include_str!("../sql/fence_flushed.sql");
const EPOCH: &str = include_str!("../sql/epoch_fence.sql");

/// `statement` with the fence `fragment` in the place of its line `{fence}`; the fragment
/// names the lock `$2` (the grants' parameter), renamed to `name`.
fn with_fence(statement: &str, fragment: &str, name: &str) -> String {
    statement.replace("\n{fence}\n", &format!("\n{}\n", fragment.trim_end().replace("$2", name)))
}

/// The statements, with the validated table name filled in.
#[derive(Debug)]
pub(crate) struct Sql {
    /// Exclusive grants bump the name's fence counter (the builder's `fencing`).
    pub(crate) fenced: bool,
    pub(crate) schema: String,
    /// The epoch's tables (`epoch_schema.sql`); their names, to check that they exist.
    pub(crate) epoch_schema: String,
    pub(crate) epoch_tables: [String; 2],
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
            true => (
                with_fence(include_str!("../sql/try_lock.sql"), FLUSHED, "$2"),
                with_fence(include_str!("../sql/lock_wait.sql"), FLUSHED, "$2"),
            ),
            false => (
                include_str!("../sql/try_lock_unfenced.sql").to_owned(),
                include_str!("../sql/lock_wait_unfenced.sql").to_owned(),
            ),
        };
        Sql {
            fenced,
            schema: render(include_str!("../sql/schema.sql")),
            epoch_schema: render(include_str!("../sql/epoch_schema.sql")),
            epoch_tables: [format!("{table}_epoch"), format!("{table}_boot")],
            try_lock: render(&try_lock),
            lock_wait: render(&lock_wait),
            try_lock_shared: render(include_str!("../sql/try_lock_shared.sql")),
            lock_wait_shared: render(include_str!("../sql/lock_wait_shared.sql")),
            inspect: render(include_str!("../sql/inspect.sql")),
            evict_fence: render(include_str!("../sql/evict_fence.sql")),
            evict_holder: render(include_str!("../sql/evict_holder.sql")),
            xact_fence: render(&with_fence(include_str!("../sql/xact_fence.sql"), FLUSHED, "$1")),
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

    /// Whether the epoch's tables can be named after `table` without PostgreSQL cutting the
    /// names to 63 bytes (where `_epoch` and `_boot` could come out as the same table).
    pub(crate) fn epoch_fits(table: &str) -> bool {
        table.len() + "_epoch".len() <= 63
    }

    /// Fenced grants draw their fences on the epoch's tables, which exist: no disk flush per
    /// grant, only per epoch (`epoch_fence.sql`).
    pub(crate) fn on_epoch(mut self, table: &str) -> Self {
        let render = |s: &str, name: &str| with_fence(s, EPOCH, name).replace("{table}", table);
        self.try_lock = render(include_str!("../sql/try_lock.sql"), "$2");
        self.lock_wait = render(include_str!("../sql/lock_wait.sql"), "$2");
        self.xact_fence = render(include_str!("../sql/xact_fence.sql"), "$1");
        self
    }
}
