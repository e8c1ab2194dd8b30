//! Notes on a hold: the value of the holder's own lock key, so a note lives and dies with the
//! key of the acquisition that set it (a later holder's key is another key), the layout of
//! etcd's own `concurrency.Election`, where observers read the first key's value.
//!
//! A key's version tells a note from the empty value the recipe puts at the grant: the grant's
//! put makes version 1, and only `set_note` puts again. So a key never given a note reads as
//! `None`, and an empty note as `Some("")`. One more put comes before a grant: a waiter queued
//! on the waiting lease is moved to the session lease when it becomes the head
//! (`session::waiting`), by a put of [`PROMOTED`], a value no note can have (a control
//! character): read as `None` too.

use etcd_client::{Compare, CompareOp, GetOptions, PutOptions, SortOrder, SortTarget, Txn, TxnOp};
use lock_core::backend::queue::{QueueHold, stored_note};
use lock_core::{LostReason, OwnerToken, Result, validate_note};

use crate::error::{bounded, lock_error};
use crate::session::{Inner, PROMOTED};

/// The note in a lock key's value, if one was set: a value put after the grant (version above
/// 1), UTF-8, and a valid note.
fn decode(value: &[u8], version: i64) -> Option<String> {
    stored_note(value, version > 1 && value != PROMOTED.as_bytes())
}

impl Inner {
    /// `set_note`: one transaction, *if* `create_revision(own key) == fence` *then* put the note
    /// as its value, keeping its lease. A granted key with that create revision is the first
    /// under the prefix for as long as it exists (later keys get higher revisions), so the
    /// comparison is the proof of holding, and the put can never land on a later hold's key.
    pub async fn set_note(&self, key: &str, owner: OwnerToken, note: &str) -> Result<bool> {
        validate_note(note)?;
        let hk = (key.to_owned(), owner);
        let session = self.current();
        let live = |h: &QueueHold| {
            (!h.is_lost() && h.generation == session.generation && !session.is_ended())
                .then(|| (h.name.clone(), h.fence))
        };
        let Some((name, fence)) = self.holds.for_note(key, owner, live) else { return Ok(false) };
        let txn = Txn::new()
            .when([Compare::create_revision(name.as_str(), CompareOp::Equal, fence)])
            .and_then([TxnOp::put(name.as_str(), note, Some(PutOptions::new().with_ignore_lease()))]);
        let mut kv = self.client.kv_client();
        let resp = bounded(self.cfg.conn.request_timeout, kv.txn(txn)).await.map_err(lock_error)?;
        if !resp.succeeded() {
            // Deleted behind our back: the hold is over (the keep-alive's check would say so).
            self.holds.lose(&hk, &name, LostReason::NotOwner);
        }
        Ok(resp.succeeded())
    }

    /// `note`: the first key under the prefix by create revision, with its value, in one read.
    pub async fn note(&self, key: &str) -> Result<Option<String>> {
        let dir = self.dir(key);
        let opts =
            GetOptions::new().with_prefix().with_sort(SortTarget::Create, SortOrder::Ascend).with_limit(1);
        let mut kv = self.client.kv_client();
        let resp = bounded(self.cfg.conn.request_timeout, kv.get(dir.as_str(), Some(opts)))
            .await
            .map_err(lock_error)?;
        Ok(resp.kvs().first().and_then(|head| decode(head.value(), head.version())))
    }
}

#[cfg(test)]
mod tests {
    use super::decode;

    #[test]
    fn only_a_value_put_after_the_grant_is_a_note() {
        assert_eq!(decode(b"", 1), None, "the grant's own put");
        assert_eq!(decode(b"proposal", 1), None, "put once by someone else's recipe");
        assert_eq!(decode(b"", 2), Some(String::new()));
        assert_eq!(decode(super::PROMOTED.as_bytes(), 2), None, "a promoted waiter's grant");
        assert_eq!(decode(b"node-a:8080", 5), Some("node-a:8080".to_owned()));
        assert_eq!(decode(&[0xff, 0xfe], 2), None);
        assert_eq!(decode(b"a\tb", 2), None);
        assert_eq!(decode(&vec![b'x'; lock_core::backend::MAX_NOTE_BYTES + 1], 2), None);
    }
}
