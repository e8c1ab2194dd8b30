-- Wait in the server's lock queue, the fence drawn as in try_lock.sql. $1 the advisory key,
-- $2 the lock name, $3 the holding session's idle_session_timeout, $4 this wait's lock_timeout
-- (text, e.g. '1234ms').
--
-- lock_timeout is set for this statement only (is_local: the autocommit transaction) and
-- before the wait: the CASE evaluates its condition first. The server ends the wait at the
-- deadline with 55P03; a dropped future ends it with pg_cancel_backend (57014). A session
-- marked by another hold (dlock.held, see try_lock.sql) neither waits nor draws a fence.
WITH t AS (SELECT set_config('lock_timeout', $4, true) AS s, current_setting('idle_session_timeout') AS idle_before,
                   coalesce(current_setting('dlock.held', true), '') AS held),
     l AS (SELECT CASE WHEN t.s IS NOT NULL AND t.held = '' THEN pg_advisory_lock($1)::text END AS waited, t.idle_before,
                   t.held FROM t),
     gr AS (SELECT l.held = '' AS granted FROM l),
{fence}
SELECT l.held = '' AS ok,
       (SELECT fence FROM f) AS fence,
       CASE WHEN l.held = '' THEN set_config('idle_session_timeout', $3, false) END AS idle,
       CASE WHEN l.held = '' THEN set_config('dlock.held', $1::text, false) END AS marked,
       pg_backend_pid() AS pid,
       l.idle_before,
       l.held AS foreign,
       -- Only what `need` says must reach the disk before the answer (epoch_fence.sql).
       set_config('synchronous_commit', CASE WHEN (SELECT bump FROM need) THEN 'on' ELSE 'off' END, true)
         AS durable
FROM l
