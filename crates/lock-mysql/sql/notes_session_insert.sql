-- Session modes, the first note of a hold: written on the holding connection, inside the
-- transaction that holds the key (pessimistic: the one holding the row lock; named: one opened
-- for the note, named_note_begin*.sql). The row is never committed: every end of the hold rolls
-- it back before the key is free (the release sends ROLLBACK first; a session that dies is
-- rolled back by the server before its row and GET_LOCK locks are freed), and readers see it
-- with READ UNCOMMITTED (notes_session_read.sql). So a note is visible exactly while its hold
-- lasts. No other transaction can hold the row: writing it needs the key.
-- The row also names the hold for a force-unlock (session_holder.sql, session_evict_*.sql):
-- owner is the holding connection's id (CONNECTION_ID() as 16 bytes, big-endian) and version
-- the hold's fencing token. $1 key, $2 kind, $3 fence, $4 note.
INSERT INTO `{table}_notes` (name, kind, owner, version, note)
    VALUES (?, ?, UNHEX(LPAD(HEX(CONNECTION_ID()), 32, '0')), ?, ?)
    ON DUPLICATE KEY UPDATE owner = VALUES(owner), version = VALUES(version), note = VALUES(note)
