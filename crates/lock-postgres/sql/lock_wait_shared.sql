-- Wait in the server's lock queue for a shared hold: as lock_wait.sql, with
-- pg_advisory_lock_shared, and the name's latest fence read, not drawn (try_lock_shared.sql).
-- $1 the advisory key, $2 the lock name, $3 the holding session's idle_session_timeout, $4 this
-- wait's lock_timeout.
WITH t AS (SELECT set_config('lock_timeout', $4, true) AS s, current_setting('idle_session_timeout') AS idle_before),
     l AS (SELECT CASE WHEN t.s IS NOT NULL THEN pg_advisory_lock_shared($1)::text END AS waited, t.idle_before FROM t)
SELECT true AS ok,
       coalesce((SELECT fence FROM {table} WHERE name = $2), 0) AS fence,
       set_config('idle_session_timeout', $3, false) AS idle,
       pg_backend_pid() AS pid,
       l.idle_before
FROM l
