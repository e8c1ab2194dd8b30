-- Session modes, the first note of a hold: written on the holding connection, inside the
-- transaction that holds the key (pessimistic: the one holding the row lock; named: one opened
-- for the note, named_note_begin*.sql). The row is never committed: every end of the hold rolls
-- it back before the key is free (the release sends ROLLBACK first; a session that dies is
-- rolled back by the server before its row and GET_LOCK locks are freed), and readers see it
-- with READ UNCOMMITTED (notes_session_read.sql). So a note is visible exactly while its hold
-- lasts. No other transaction can hold the row: writing it needs the key. $1 key, $2 kind, $3 note.
INSERT INTO `{table}_notes` (name, kind, note) VALUES (?, ?, ?)
    ON DUPLICATE KEY UPDATE note = VALUES(note)
