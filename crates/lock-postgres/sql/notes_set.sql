-- Store the holder's note, on the holding connection (whose session holds the advisory lock for
-- as long as the keeper has it). The row names the hold: the name's fence, bumped by every grant
-- of the name in the granting statement, and this backend's pid. $1 the lock name, $2 the
-- hold's fence, $3 the note. 0 rows: the name's fence is not this hold's.
UPDATE {table} SET note = $3, note_fence = fence, note_pid = pg_backend_pid()
 WHERE name = $1 AND fence = $2
