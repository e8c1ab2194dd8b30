//! Records: a number and a set of marks kept on the server under a key, outside any lock and
//! any lease, for the primitives whose state must outlive every holder (a semaphore's permit
//! count, a count-down latch). One operation per call, each idempotent when sent twice: a
//! resent `Init` or `Set` stores the same number, a resent `Mark` finds its token already there.

use std::collections::HashSet;

/// What [`Records::record`](super::Records::record) does to the record under a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RecordOp<'a> {
    /// Read it.
    Get,
    /// Store this number unless one is stored already.
    Init(u64),
    /// Store this number, whatever is stored (the marks stay).
    Set(u64),
    /// Add this token to the marks while a number is stored (a token already there is not
    /// added again, so a resent mark counts once; without a number nothing is added).
    Mark(&'a str),
    /// Remove the number and every mark.
    Delete,
}

/// A record as the store holds it once the operation is applied.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Record {
    /// The stored number, if any.
    pub value: Option<u64>,
    /// How many distinct tokens were marked.
    pub marks: u64,
}

/// A record kept in memory, for a store that keeps its records in its own process (the memory
/// backend) or as a model of the rules in a test.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct LocalRecord {
    value: Option<u64>,
    marks: HashSet<String>,
}

impl LocalRecord {
    /// A record read back from a store that keeps it as a whole (a file).
    pub fn from_parts(value: Option<u64>, marks: impl IntoIterator<Item = String>) -> Self {
        LocalRecord { value, marks: marks.into_iter().collect() }
    }

    /// The number and the marks, to write back as a whole.
    pub fn parts(&self) -> (Option<u64>, impl Iterator<Item = &str>) {
        (self.value, self.marks.iter().map(String::as_str))
    }

    /// The record as text, as a store that keeps it whole writes it (a file, a key's value):
    /// its number (`-` for none) on the first line, then one mark per line.
    pub fn to_text(&self) -> String {
        let mut text = self.value.map_or_else(|| "-".to_owned(), |v| v.to_string());
        for m in &self.marks {
            text.push('\n');
            text.push_str(m);
        }
        text.push('\n');
        text
    }

    /// A record read back from [`to_text`](Self::to_text)'s form; `None` for text that is not
    /// one.
    pub fn from_text(text: &str) -> Option<LocalRecord> {
        let mut lines = text.lines();
        let value = match lines.next() {
            None | Some("-") => None,
            Some(v) => Some(v.parse().ok()?),
        };
        Some(LocalRecord::from_parts(value, lines.map(str::to_owned)))
    }

    /// Whether `token` can be a mark in the text form: not empty, no line break.
    pub fn valid_mark(token: &str) -> bool {
        !token.is_empty() && !token.contains(['\n', '\r'])
    }

    /// Apply `op`; `false` in the answer's second place when the record is now empty (it can
    /// be dropped).
    pub fn apply(&mut self, op: RecordOp<'_>) -> (Record, bool) {
        match op {
            RecordOp::Get => {}
            RecordOp::Init(v) => {
                self.value.get_or_insert(v);
            }
            RecordOp::Set(v) => self.value = Some(v),
            RecordOp::Mark(token) if self.value.is_some() => {
                self.marks.insert(token.to_owned());
            }
            RecordOp::Mark(_) => {}
            RecordOp::Delete => *self = LocalRecord::default(),
        }
        let record = Record { value: self.value, marks: self.marks.len() as u64 };
        (record, self.value.is_some() || !self.marks.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::{LocalRecord, Record, RecordOp};

    #[test]
    fn marks_count_once_and_only_under_a_number() {
        let mut r = LocalRecord::default();
        assert_eq!(r.apply(RecordOp::Mark("a")), (Record { value: None, marks: 0 }, false));
        assert_eq!(r.apply(RecordOp::Init(2)).0, Record { value: Some(2), marks: 0 });
        assert_eq!(r.apply(RecordOp::Init(5)).0.value, Some(2), "init keeps a stored number");
        assert_eq!(r.apply(RecordOp::Mark("a")).0.marks, 1);
        assert_eq!(r.apply(RecordOp::Mark("a")).0.marks, 1, "a resent mark counts once");
        assert_eq!(r.apply(RecordOp::Set(3)).0, Record { value: Some(3), marks: 1 });
        assert_eq!(r.apply(RecordOp::Delete), (Record::default(), false));
    }

    #[test]
    fn the_text_form_reads_back_what_it_wrote() {
        let mut r = LocalRecord::default();
        assert_eq!(LocalRecord::from_text(&r.to_text()), Some(r.clone()));
        r.apply(RecordOp::Init(3));
        r.apply(RecordOp::Mark("a b"));
        r.apply(RecordOp::Mark("c"));
        assert_eq!(LocalRecord::from_text(&r.to_text()), Some(r.clone()));
        assert_eq!(r.apply(RecordOp::Get).0, Record { value: Some(3), marks: 2 });
        assert!(LocalRecord::from_text("three\n").is_none());
        assert!(
            !LocalRecord::valid_mark("")
                && !LocalRecord::valid_mark("a\nb")
                && LocalRecord::valid_mark("a b")
        );
    }
}
