-- One unfenced attempt (the builder's fencing(false)), one round trip: try_lock.sql without the
-- fence counter, so a grant writes nothing and waits for no WAL flush; its fence reads 0. $1 the
-- advisory key, $2 the lock name (unused, but typed: the statements share their parameters),
-- $3 the holding session's idle_session_timeout.
-- The hold's mark (dlock.held) as in try_lock.sql.
WITH g AS (SELECT coalesce(current_setting('dlock.held', true), '') AS held),
     l AS (SELECT CASE WHEN g.held = '' THEN pg_try_advisory_lock($1) ELSE false END AS ok,
                   current_setting('idle_session_timeout') AS idle_before, g.held FROM g)
SELECT l.ok,
       CASE WHEN l.ok AND $2::bytea IS NOT NULL THEN 0::bigint END AS fence,
       CASE WHEN l.ok THEN set_config('idle_session_timeout', $3, false) END AS idle,
       CASE WHEN l.ok THEN set_config('dlock.held', $1::text, false) END AS marked,
       pg_backend_pid() AS pid,
       l.idle_before,
       l.held AS foreign
FROM l
