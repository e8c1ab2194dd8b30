//! Notes of a queue store: the value of the holder's own entry, so a note lives and dies with
//! the entry of the acquisition that set it (a later holder's entry is another one).

use crate::validate_note;

/// The note in an entry's value. Only a value written after the entry's create
/// (`written_later`, which the store tells by the entry's version: the create writes the first)
/// that is UTF-8 and a valid note is one; anything else (the create's own value, a foreign
/// client's data) is no note: a reader must never show it as the holder's.
pub fn stored_note(value: &[u8], written_later: bool) -> Option<String> {
    if !written_later {
        return None;
    }
    let note = std::str::from_utf8(value).ok().filter(|n| validate_note(n).is_ok()).map(str::to_owned);
    if note.is_none() {
        tracing::debug!("lock entry value is not a note; read as none");
    }
    note
}
