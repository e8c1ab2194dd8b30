//! Notes on a hold: the data of the holder's own lock node, so a note lives and dies with the
//! node of the acquisition that set it, and no later holder's readers can see it.
//!
//! A node's data version tells a note from the data a lock node is created with: every lock
//! node starts at version 0 (ours empty, Curator's with its client's default data, the local
//! IP address; kazoo's with the `Lock`'s identifier), and only `set_note` sets data later, but
//! for a waiter's heartbeats and claim (see `waiting.rs`), which start with a NUL: no note. So
//! a Curator or kazoo holder reads as "no note", and an empty note as `Some("")`.

use std::sync::Arc;

use lock_core::backend::queue::{QueueHold, stored_note};
use lock_core::{LostReason, OwnerToken, Result, validate_note};
use tokio::time::Instant;
use zookeeper_client as zk;

use crate::contenders::queue;
use crate::error::{lock_error, session_ended, temporary};
use crate::session::Inner;

/// How often `note` lists the queue again when its head was deleted between the listing and
/// the read (the holder released meanwhile): each retry follows a hand-over, so this bounds
/// only a queue churning faster than two round trips.
const NOTE_READS: usize = 8;

/// The note in a lock node's data, if one was set: data written after the create (version
/// above 0), UTF-8, and a valid note.
pub(crate) fn decode(data: Vec<u8>, version: i32) -> Option<String> {
    stored_note(&data, version != 0)
}

impl Inner {
    /// `set_note`: the data of `owner`'s own node, if it still holds `key` on this session.
    /// Once a hold's node is the lowest it stays the lowest while it exists (later nodes get
    /// higher sequence numbers, and the directory is not reaped while it has a child), so the
    /// node existing is the proof of holding; its path is unique to the acquisition, so the
    /// write can never land on a later hold.
    pub async fn set_note(&self, key: &str, owner: OwnerToken, note: &str) -> Result<bool> {
        validate_note(note)?;
        let hk = (key.to_owned(), owner);
        let live = |h: &QueueHold| (!h.is_lost()).then(|| (h.name.clone(), h.generation));
        let Some((path, generation)) = self.holds.for_note(key, owner, live) else { return Ok(false) };
        let session = self.current();
        if session.generation != generation || session.client.state().is_terminated() {
            return Ok(false); // the session that held it is gone, and its node with it
        }
        let sent = Instant::now();
        match session.client.set_data(&path, note.as_bytes(), None).await {
            Ok(_) => {
                session.confirm(sent);
                Ok(true)
            }
            Err(zk::Error::NoNode) => {
                // Deleted behind our back: the hold is over (its watch would say so too).
                self.holds.lose(&hk, &path, LostReason::NotOwner);
                Ok(false)
            }
            Err(e) if session_ended(&e) => Ok(false),
            Err(e) => Err(lock_error(e)),
        }
    }

    /// `note`: list the queue, read the head node's data. A head deleted between the two is
    /// listed again: its holder released, and the answer is the next holder's.
    pub async fn note(self: &Arc<Self>, key: &str) -> Result<Option<String>> {
        let session = self.session().await?;
        let dir = self.dir(key);
        for _ in 0..NOTE_READS {
            let children = match session.client.list_children(&dir).await {
                Ok(c) => c,
                Err(zk::Error::NoNode) => return Ok(None),
                Err(e) => return Err(lock_error(e)),
            };
            let Some((_, head)) = queue(children).into_iter().next() else { return Ok(None) };
            match session.client.get_data(&format!("{dir}/{head}")).await {
                Ok((data, stat)) => return Ok(decode(data, stat.version)),
                Err(zk::Error::NoNode) => continue,
                Err(e) => return Err(lock_error(e)),
            }
        }
        Err(temporary("the lock changed hands faster than its note could be read"))
    }
}

#[cfg(test)]
mod tests {
    use super::decode;

    #[test]
    fn only_data_set_after_the_create_is_a_note() {
        // Curator's lock nodes carry the client's address from the create: not a note.
        assert_eq!(decode(b"10.0.0.7".to_vec(), 0), None);
        assert_eq!(decode(Vec::new(), 0), None);
        assert_eq!(decode(Vec::new(), 1), Some(String::new()));
        assert_eq!(decode(b"node-a:8080".to_vec(), 3), Some("node-a:8080".to_owned()));
        // Written by something else: never shown as the holder's note.
        assert_eq!(decode(vec![0xff, 0xfe], 1), None);
        assert_eq!(decode(b"a\nb".to_vec(), 1), None);
        assert_eq!(decode(vec![b'x'; lock_core::backend::MAX_NOTE_BYTES + 1], 1), None);
    }
}
