-- Release of a hold with a note: as unlock.sql, and the note cleared in the same statement (a
-- later hold of a name whose advisory key collides with this one's, on this very pooled
-- connection, must not find it). $1 the advisory key, $2 the session's idle_session_timeout from
-- before the grant, $3 the lock name.
-- A release clears the hold's mark (dlock.held, try_lock.sql); an unlock that found no hold
-- (another server session's, behind a pooler) leaves that session's mark alone.
WITH cleared AS (UPDATE {table} SET note = NULL, note_fence = NULL, note_pid = NULL
                  WHERE name = $3 AND note_pid = pg_backend_pid()),
     u AS (SELECT pg_advisory_unlock($1) AS released)
SELECT u.released, set_config('idle_session_timeout', $2, false),
       CASE WHEN u.released THEN set_config('dlock.held', '', false) END
FROM u
