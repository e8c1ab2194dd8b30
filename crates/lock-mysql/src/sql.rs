//! The SQL this backend sends, loaded from `sql/*.sql` with the validated table name filled in.

use std::sync::Arc;

use lock_core::LockError;

/// Which server dialect is on the other end: it decides the statements (MariaDB has
/// `SET STATEMENT` and `SEQUENCE`, MySQL has neither).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Flavor {
    MariaDb,
    MySql,
}

impl Flavor {
    /// The flavor of a server that answered `SELECT VERSION()` with `version`.
    pub(crate) fn of_version(version: &str) -> Self {
        if version.to_ascii_lowercase().contains("mariadb") { Flavor::MariaDb } else { Flavor::MySql }
    }
}

/// Longest accepted table name: MySQL identifiers are at most 64 characters and the
/// pessimistic mode also creates `<table>_fence` (and every mode `<table>_notes`, as long).
pub const MAX_TABLE_NAME: usize = 64 - "_fence".len();

/// Check a table name: ASCII letters, digits and `_`, not starting with a digit, at most
/// [`MAX_TABLE_NAME`] characters. Anything else (quotes, backticks, dots, spaces, comments)
/// is refused, so the name can be spliced into SQL between backticks.
///
/// # Errors
/// [`LockError::InvalidConfig`] naming the problem.
pub fn validate_table_name(name: &str) -> Result<(), LockError> {
    let bad =
        |why: &str| Err(LockError::InvalidConfig { reason: format!("invalid table name {name:?}: {why}") });
    if name.is_empty() {
        return bad("empty");
    }
    if name.len() > MAX_TABLE_NAME {
        return bad("longer than 58 characters");
    }
    if name.as_bytes()[0].is_ascii_digit() {
        return bad("starts with a digit");
    }
    if !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        return bad("only ASCII letters, digits and '_' are allowed");
    }
    Ok(())
}

/// Fill `{table}` into a statement template. Only ever called with a validated name.
pub(crate) fn render(template: &str, table: &str) -> Arc<str> {
    without_comment_lines(template).replace("{table}", table).into()
}

/// `sql` without its whole-line `--` comments. The files explain each statement to its readers;
/// a statement sent as text would carry that explanation to the server on every call, to be
/// read and lexed there (most of the bytes of `named_get_lock_mariadb.sql`).
fn without_comment_lines(sql: &str) -> String {
    let kept: Vec<&str> = sql.lines().filter(|l| !l.trim_start().starts_with("--")).collect();
    kept.join("\n")
}

/// `bytes` as a MySQL hex literal `X'6b6579'`: hex digits only, so it can be spliced into a
/// statement that must be sent as text without any way to end the literal early. Compares
/// byte-exactly with a `VARBINARY` column (an empty input gives `X''`).
pub(crate) fn hex_literal(bytes: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2 + 3);
    s.push_str("X'");
    for b in bytes {
        s.push(char::from(HEX[usize::from(b >> 4)]));
        s.push(char::from(HEX[usize::from(b & 0xf)]));
    }
    s.push('\'');
    s
}

/// Which mode wrote a row of the notes table (its `kind` column).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NoteKind {
    Pessimistic = 1,
    Named = 2,
    Optimistic = 3,
}

/// Statements of notes on holds (`set_note` / `note`), every mode: `sql/notes_*.sql`.
#[derive(Debug)]
pub(crate) struct NotesSql {
    pub schema: Arc<str>,
    /// Session modes: the first note of a hold, in its transaction.
    pub session_insert: Arc<str>,
    /// Session modes: a later note of the same hold.
    pub session_update: Arc<str>,
    /// Session modes: template with `{key}` (a [`hex_literal`]) still to fill; sent as text.
    pub session_read: Arc<str>,
    pub optimistic_set: Arc<str>,
    pub optimistic_read: Arc<str>,
    /// Session modes, force-unlock (`crate::session::evict`): who holds, and the noted
    /// hold's fence; templates with `{key}` and `{holder}`, or `{fence}` and `{check}`, to fill.
    pub holder: Arc<str>,
    pub evict_mariadb: Arc<str>,
    pub evict_check_mysql: Arc<str>,
}

impl NotesSql {
    pub fn new(table: &str, kind: NoteKind) -> Self {
        let kind_of = |sql: &str| sql.replace("{kind}", &(kind as u8).to_string());
        let read = kind_of(include_str!("../sql/notes_session_read.sql"));
        NotesSql {
            schema: render(include_str!("../sql/notes_schema.sql"), table),
            session_insert: render(include_str!("../sql/notes_session_insert.sql"), table),
            session_update: render(include_str!("../sql/notes_session_update.sql"), table),
            session_read: render(&read, table),
            optimistic_set: render(include_str!("../sql/notes_optimistic_set.sql"), table),
            optimistic_read: render(include_str!("../sql/notes_optimistic_read.sql"), table),
            holder: render(&kind_of(include_str!("../sql/session_holder.sql")), table),
            evict_mariadb: render(&kind_of(include_str!("../sql/session_evict_mariadb.sql")), table),
            evict_check_mysql: render(&kind_of(include_str!("../sql/session_evict_check_mysql.sql")), table),
        }
    }
}

/// Statements of the pessimistic mode.
#[derive(Debug)]
pub(crate) struct PessimisticSql {
    pub schema: Arc<str>,
    /// Run once per holding connection (autocommit off, the idle bounds); template with
    /// `{idle}` (seconds) still to fill.
    pub session: &'static str,
    /// MariaDB: returns the fencing token (NEXTVAL) of the granted lock; MySQL: returns 0.
    /// Prepared, the key bound.
    pub lock_nowait: Arc<str>,
    /// Template with `{max_statement_time}` / `{lock_wait_timeout}` (numbers) and `{key}` (a
    /// [`hex_literal`]) still to fill; sent as text (see the SQL file for why).
    pub lock_wait_mariadb: Arc<str>,
    /// Template with `{max_execution_ms}` (a number) and `{key}` (a [`hex_literal`]) still to
    /// fill; sent as text.
    pub lock_wait_mysql: Arc<str>,
    /// The same three for a shared lock of the row (the read side of a read-write lock),
    /// which draws no fence.
    pub share_nowait: Arc<str>,
    pub share_wait_mariadb: Arc<str>,
    pub share_wait_mysql: Arc<str>,
    pub row_exists: Arc<str>,
    /// Whether the row is free, locking it for one statement (inspecting an un-noted hold).
    pub probe: Arc<str>,
    pub row_insert: Arc<str>,
    pub row_insert_mariadb: Arc<str>,
    /// MySQL only (MariaDB draws the token in the locking statement): per-key counter.
    pub fence_next: Arc<str>,
    pub notes: NotesSql,
}

impl PessimisticSql {
    pub fn new(table: &str, flavor: Flavor) -> Self {
        let (schema, lock_nowait, share_nowait) = match flavor {
            Flavor::MariaDb => (
                include_str!("../sql/pessimistic_schema_mariadb.sql"),
                include_str!("../sql/pessimistic_lock_nowait_mariadb.sql"),
                include_str!("../sql/pessimistic_share_nowait_mariadb.sql"),
            ),
            Flavor::MySql => (
                include_str!("../sql/pessimistic_schema.sql"),
                include_str!("../sql/pessimistic_lock_nowait.sql"),
                include_str!("../sql/pessimistic_share_nowait.sql"),
            ),
        };
        PessimisticSql {
            schema: render(schema, table),
            session: match flavor {
                Flavor::MariaDb => include_str!("../sql/pessimistic_session_mariadb.sql"),
                Flavor::MySql => include_str!("../sql/pessimistic_session.sql"),
            },
            lock_nowait: render(lock_nowait, table),
            lock_wait_mariadb: render(include_str!("../sql/pessimistic_lock_wait_mariadb.sql"), table),
            lock_wait_mysql: render(include_str!("../sql/pessimistic_lock_wait_mysql.sql"), table),
            share_nowait: render(share_nowait, table),
            share_wait_mariadb: render(include_str!("../sql/pessimistic_share_wait_mariadb.sql"), table),
            share_wait_mysql: render(include_str!("../sql/pessimistic_share_wait_mysql.sql"), table),
            row_exists: render(include_str!("../sql/pessimistic_row_exists.sql"), table),
            probe: render(include_str!("../sql/pessimistic_probe.sql"), table),
            row_insert: render(include_str!("../sql/pessimistic_row_insert.sql"), table),
            row_insert_mariadb: render(include_str!("../sql/pessimistic_row_insert_mariadb.sql"), table),
            fence_next: render(include_str!("../sql/pessimistic_fence_next.sql"), table),
            notes: NotesSql::new(table, NoteKind::Pessimistic),
        }
    }
}

/// Statements of the named (`GET_LOCK`) mode.
#[derive(Debug)]
pub(crate) struct NamedSql {
    /// The fence object only (GET_LOCK needs no table).
    pub schema: Arc<str>,
    /// Run once per holding connection (the idle bounds); template with `{idle}` (seconds) still
    /// to fill.
    pub session: &'static str,
    /// Template with `{name}` (a utf8mb4-converted [`hex_literal`]) and `{timeout}` (seconds, a
    /// number) still to fill; sent as text.
    pub get_lock: Arc<str>,
    /// `get_lock` with the name and the wait bound (`?`, `?`): prepared and cached per
    /// connection, for a wait on a kept connection, whose id is known.
    pub get_lock_bound: Arc<str>,
    /// MySQL only (MariaDB draws the token in the GET_LOCK statement): per-key counter.
    pub fence_next: Arc<str>,
    pub inspect: Arc<str>,
    /// Opens the transaction of a hold's notes.
    pub note_begin: &'static str,
    pub notes: NotesSql,
}

impl NamedSql {
    pub fn new(table: &str, flavor: Flavor) -> Self {
        let (schema, get_lock) = match flavor {
            Flavor::MariaDb => (
                include_str!("../sql/named_schema_mariadb.sql"),
                include_str!("../sql/named_get_lock_mariadb.sql"),
            ),
            Flavor::MySql => {
                (include_str!("../sql/named_schema.sql"), include_str!("../sql/named_get_lock.sql"))
            }
        };
        NamedSql {
            schema: render(schema, table),
            session: match flavor {
                Flavor::MariaDb => include_str!("../sql/named_session_mariadb.sql"),
                Flavor::MySql => include_str!("../sql/named_session.sql"),
            },
            get_lock: render(get_lock, table),
            get_lock_bound: render(get_lock, table).replace("{name}", "?").replace("{timeout}", "?").into(),
            fence_next: render(include_str!("../sql/pessimistic_fence_next.sql"), table),
            inspect: render(include_str!("../sql/named_inspect.sql"), table),
            note_begin: include_str!("../sql/named_note_begin.sql"),
            notes: NotesSql::new(table, NoteKind::Named),
        }
    }
}

/// How the optimistic mode takes a row.
#[derive(Debug)]
pub(crate) enum OptimisticAcquire {
    /// MariaDB: take-or-create in one statement, answering the row (a missing row is created
    /// free, and taken by the next round: see `sql/optimistic_acquire_mariadb.sql`).
    OneStatement(Arc<str>),
    /// MySQL, which has no `RETURNING`: take, then probe, then insert (per-row versions; rows
    /// are never deleted, so a first insert's version 1 is the key's first fence).
    TakeOrInsert { take: Arc<str>, insert: Arc<str> },
}

/// Statements of the optimistic mode.
#[derive(Debug)]
pub(crate) struct OptimisticSql {
    pub schema: Arc<str>,
    pub acquire: OptimisticAcquire,
    pub probe: Arc<str>,
    pub reenter: Arc<str>,
    pub release: Arc<str>,
    /// Force-unlock of the hold with the inspected fence.
    pub evict: Arc<str>,
    pub renew: Arc<str>,
    /// Fallback cleanup of a cancelled attempt, by its nonce, on another connection.
    pub cancel: Arc<str>,
    /// Template with `{key}`, `{owner}`, `{nonce}` (hex literals) still to fill: the cleanup of
    /// a cancelled attempt on its own connection, sent as text (for this flavor's statements).
    pub cancel_here: Arc<str>,
    /// MariaDB: delete rows of keys nobody holds.
    pub sweep: Arc<str>,
    /// Upgrade a table created before UTC leases (every old client stopped).
    pub upgrade: Arc<str>,
    pub notes: NotesSql,
}

impl OptimisticSql {
    pub fn new(table: &str, flavor: Flavor) -> Self {
        let (schema, acquire, cancel_here) = match flavor {
            Flavor::MariaDb => (
                include_str!("../sql/optimistic_schema_mariadb.sql"),
                OptimisticAcquire::OneStatement(render(
                    include_str!("../sql/optimistic_acquire_mariadb.sql"),
                    table,
                )),
                include_str!("../sql/optimistic_cancel_here_mariadb.sql"),
            ),
            Flavor::MySql => (
                include_str!("../sql/optimistic_schema.sql"),
                OptimisticAcquire::TakeOrInsert {
                    take: render(include_str!("../sql/optimistic_take.sql"), table),
                    insert: render(include_str!("../sql/optimistic_insert.sql"), table),
                },
                include_str!("../sql/optimistic_cancel_here.sql"),
            ),
        };
        OptimisticSql {
            schema: render(schema, table),
            acquire,
            probe: render(include_str!("../sql/optimistic_probe.sql"), table),
            reenter: render(include_str!("../sql/optimistic_reenter.sql"), table),
            release: render(include_str!("../sql/optimistic_release.sql"), table),
            evict: render(include_str!("../sql/optimistic_evict.sql"), table),
            renew: render(include_str!("../sql/optimistic_renew.sql"), table),
            cancel: render(include_str!("../sql/optimistic_cancel.sql"), table),
            cancel_here: render(cancel_here, table),
            sweep: render(include_str!("../sql/optimistic_sweep.sql"), table),
            upgrade: render(include_str!("../sql/optimistic_upgrade.sql"), table),
            notes: NotesSql::new(table, NoteKind::Optimistic),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_names_are_identifiers_only() {
        for ok in ["dlock", "_x", "Locks_2", &"a".repeat(MAX_TABLE_NAME)] {
            assert!(validate_table_name(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "1abc",
            "a b",
            "a`; DROP TABLE x; --",
            "db.t",
            "t'",
            "t\"",
            "t--",
            "t;",
            "тable",
            &"a".repeat(MAX_TABLE_NAME + 1),
        ] {
            assert!(matches!(validate_table_name(bad), Err(LockError::InvalidConfig { .. })), "{bad}");
        }
    }

    #[test]
    fn hex_literals_carry_any_key_exactly() {
        assert_eq!(hex_literal(b"k"), "X'6b'");
        assert_eq!(hex_literal("a'b\\c`;--é".as_bytes()), "X'6127625c63603b2d2dc3a9'");
        assert_eq!(hex_literal(&[0x00, 0x0f, 0xf0, 0xff]), "X'000ff0ff'");
        let lit = hex_literal("x' OR 1=1 -- {key}".as_bytes());
        assert!(lit[2..lit.len() - 1].bytes().all(|b| b.is_ascii_hexdigit()));
    }

    #[test]
    fn every_statement_has_its_table() {
        for flavor in [Flavor::MariaDb, Flavor::MySql] {
            let p = PessimisticSql::new("tbl", flavor);
            assert!(p.lock_nowait.contains("`tbl`") && p.fence_next.contains("`tbl_fence`"));
            assert!(p.lock_nowait.contains("name = ?") && p.lock_nowait.matches('?').count() == 1);
            assert!(p.session.contains("autocommit = 0") && p.session.contains("wait_timeout = {idle}"));
            assert_eq!(p.lock_nowait.contains("NEXTVAL(`tbl_fence`)"), flavor == Flavor::MariaDb);
            assert!(p.lock_wait_mariadb.contains("NEXTVAL(`tbl_fence`)"));
            assert!(
                p.lock_wait_mariadb.contains("name = {key}") && p.lock_wait_mysql.contains("name = {key}")
            );
            assert!(!p.lock_wait_mariadb.contains('?') && !p.lock_wait_mysql.contains('?'));
            assert!(!p.schema.contains("{table}"));
            let o = OptimisticSql::new("tbl", flavor);
            assert!(!o.release.contains("{table}") && o.release.contains("`tbl`"));
            match &o.acquire {
                OptimisticAcquire::OneStatement(one) => {
                    assert_eq!(flavor, Flavor::MariaDb);
                    // The fence is drawn only in the update branch, under the row's lock.
                    let values = one.split("ON DUPLICATE KEY UPDATE").next().expect("values");
                    assert!(!values.contains("NEXTVAL") && one.contains("NEXTVAL(`tbl_fence`)"));
                }
                OptimisticAcquire::TakeOrInsert { take, insert } => {
                    assert_eq!(flavor, Flavor::MySql);
                    assert!(take.contains("`tbl`") && !insert.contains("{table}"));
                }
            }
            // A statement with RETURNING leaves ROW_COUNT() at -1: the MariaDB cleanup must not test it.
            assert_eq!(o.cancel_here.contains("ROW_COUNT()"), flavor == Flavor::MySql);
            assert!(o.cancel_here.contains("@dlock_attempt = {nonce}"));
            let n = NamedSql::new("tbl", flavor);
            assert!(n.schema.contains("`tbl_fence`") && !n.schema.contains("`tbl`"));
            assert!(n.get_lock.contains("GET_LOCK({name}, {timeout})") && !n.get_lock.contains('?'));
            assert_eq!(n.get_lock.contains("NEXTVAL(`tbl_fence`)"), flavor == Flavor::MariaDb);
            assert!(n.session.contains("{idle}") && n.fence_next.contains("`tbl_fence`"));
            assert!(n.note_begin.contains("BEGIN"));
            assert!(!n.get_lock.contains("--") && n.get_lock.starts_with("SELECT CASE GET_LOCK"));
            assert!(n.get_lock_bound.contains("GET_LOCK(?, ?)") && !n.get_lock_bound.contains('{'));
            assert_eq!(n.session.contains("idle_transaction_timeout"), flavor == Flavor::MariaDb);
            for notes in [&p.notes, &n.notes, &o.notes] {
                assert!(notes.schema.contains("`tbl_notes`") && !notes.schema.contains("{table}"));
                assert!(notes.session_read.contains("name = {key}") && !notes.session_read.contains('?'));
            }
            assert!(p.notes.session_read.contains("kind = 1") && n.notes.session_read.contains("kind = 2"));
            assert!(o.notes.optimistic_read.contains("JOIN `tbl` t"));
        }
    }
}
