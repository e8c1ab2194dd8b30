-- An unfenced wait in the server's lock queue (the builder's fencing(false)): lock_wait.sql
-- without the fence counter; its fence reads 0. $1 the advisory key, $2 the lock name (unused,
-- but typed), $3 the holding session's idle_session_timeout, $4 this wait's lock_timeout.
WITH t AS (SELECT set_config('lock_timeout', $4, true) AS s, current_setting('idle_session_timeout') AS idle_before),
     l AS (SELECT CASE WHEN t.s IS NOT NULL THEN pg_advisory_lock($1)::text END AS waited, t.idle_before FROM t)
SELECT true AS ok,
       CASE WHEN $2::bytea IS NOT NULL THEN 0::bigint END AS fence,
       set_config('idle_session_timeout', $3, false) AS idle,
       pg_backend_pid() AS pid,
       l.idle_before
FROM l
