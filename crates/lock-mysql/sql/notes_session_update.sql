-- Session modes, a later note of the same hold: the row is this transaction's own. An update by
-- the whole primary key locks that record only; a second INSERT ... ON DUPLICATE KEY UPDATE
-- could also lock the gap before it (repeatable read), which would make another holder's first
-- note wait for this hold to end. $1 note, $2 key, $3 kind.
UPDATE `{table}_notes` SET note = ? WHERE name = ? AND kind = ?
