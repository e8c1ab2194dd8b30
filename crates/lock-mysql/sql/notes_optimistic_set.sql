-- Optimistic mode: store the note with the owner's current hold, in one autocommit statement
-- that checks the hold by the database clock: nothing is written unless the owner holds the key
-- on a live lease now (0 rows). The row names the hold by (owner, version): version changes at
-- every grant, so the row of an earlier hold never matches a later one. $1 note, $2 key, $3 owner.
INSERT INTO `{table}_notes` (name, kind, owner, version, note)
SELECT name, 3, owner, version, ? FROM `{table}`
 WHERE name = ? AND owner = ? AND expires_at > UTC_TIMESTAMP(6)
ON DUPLICATE KEY UPDATE owner = VALUES(owner), version = VALUES(version), note = VALUES(note)
