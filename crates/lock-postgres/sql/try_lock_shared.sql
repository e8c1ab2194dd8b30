-- One shared attempt (the read side of a read-write lock), one round trip: as try_lock.sql,
-- with pg_try_advisory_lock_shared. A shared hold draws no fence (nothing is written, so
-- nothing needs a durable commit): it reads the name's latest one, 0 before any. The server
-- refuses the try while an exclusive request waits in the key's queue (its wait mask), so a
-- waiting writer keeps new readers out. $1 the advisory key, $2 the lock name, $3 the holding
-- session's idle_session_timeout.
-- The hold's mark (dlock.held) as in try_lock.sql.
WITH g AS (SELECT coalesce(current_setting('dlock.held', true), '') AS held),
     l AS (SELECT CASE WHEN g.held = '' THEN pg_try_advisory_lock_shared($1) ELSE false END AS ok,
                   current_setting('idle_session_timeout') AS idle_before, g.held FROM g)
SELECT l.ok,
       CASE WHEN l.ok THEN coalesce((SELECT fence FROM {table} WHERE name = $2), 0) END AS fence,
       CASE WHEN l.ok THEN set_config('idle_session_timeout', $3, false) END AS idle,
       CASE WHEN l.ok THEN set_config('dlock.held', $1::text, false) END AS marked,
       pg_backend_pid() AS pid,
       l.idle_before,
       l.held AS foreign
FROM l
