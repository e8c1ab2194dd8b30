-- Release of a hold with a note: as unlock.sql, and the note cleared in the same statement (a
-- later hold of a name whose advisory key collides with this one's, on this very pooled
-- connection, must not find it). $1 the advisory key, $2 the session's idle_session_timeout from
-- before the grant, $3 the lock name.
WITH cleared AS (UPDATE {table} SET note = NULL, note_fence = NULL, note_pid = NULL
                  WHERE name = $3 AND note_pid = pg_backend_pid())
SELECT pg_advisory_unlock($1) AS released, set_config('idle_session_timeout', $2, false)
