-- Wait in the server's lock queue. $1 the advisory key, $2 the lock name, $3 the holding
-- session's idle_session_timeout, $4 this wait's lock_timeout (text, e.g. '1234ms').
--
-- lock_timeout is set for this statement only (is_local: the autocommit transaction) and
-- before the wait: the CASE evaluates its condition first. The server ends the wait at the
-- deadline with 55P03; a dropped future ends it with pg_cancel_backend (57014).
WITH t AS (SELECT set_config('lock_timeout', $4, true) AS s, current_setting('idle_session_timeout') AS idle_before),
     l AS (SELECT CASE WHEN t.s IS NOT NULL THEN pg_advisory_lock($1)::text END AS waited, t.idle_before FROM t),
     f AS (INSERT INTO {table} AS x (name, fence) SELECT $2, 1 FROM l
           ON CONFLICT (name) DO UPDATE SET fence = x.fence + 1
           RETURNING x.fence)
SELECT true AS ok,
       (SELECT fence FROM f) AS fence,
       set_config('idle_session_timeout', $3, false) AS idle,
       pg_backend_pid() AS pid,
       l.idle_before,
       -- The fence must outlive a server crash whatever the role's default: a lost bump
       -- would hand the next holder a token already used.
       set_config('synchronous_commit', 'on', true) AS durable
FROM l
