-- An unfenced wait in the server's lock queue (the builder's fencing(false)): lock_wait.sql
-- without the fence counter; its fence reads 0. $1 the advisory key, $2 the lock name (unused,
-- but typed), $3 the holding session's idle_session_timeout, $4 this wait's lock_timeout.
-- The hold's mark (dlock.held) as in try_lock.sql.
WITH t AS (SELECT set_config('lock_timeout', $4, true) AS s, current_setting('idle_session_timeout') AS idle_before,
                   coalesce(current_setting('dlock.held', true), '') AS held),
     l AS (SELECT CASE WHEN t.s IS NOT NULL AND t.held = '' THEN pg_advisory_lock($1)::text END AS waited, t.idle_before,
                   t.held FROM t)
SELECT l.held = '' AS ok,
       CASE WHEN l.held = '' AND $2::bytea IS NOT NULL THEN 0::bigint END AS fence,
       CASE WHEN l.held = '' THEN set_config('idle_session_timeout', $3, false) END AS idle,
       CASE WHEN l.held = '' THEN set_config('dlock.held', $1::text, false) END AS marked,
       pg_backend_pid() AS pid,
       l.idle_before,
       l.held AS foreign
FROM l
