-- Release of a shared hold. $1 the advisory key, $2 the session's idle_session_timeout from
-- before the grant.
-- A release clears the hold's mark (dlock.held, try_lock.sql); an unlock that found no hold
-- (another server session's, behind a pooler) leaves that session's mark alone.
WITH u AS (SELECT pg_advisory_unlock_shared($1) AS released)
SELECT u.released, set_config('idle_session_timeout', $2, false),
       CASE WHEN u.released THEN set_config('dlock.held', '', false) END
FROM u
