-- One attempt, one round trip. $1 the advisory key (bigint), $2 the lock name (bytea), $3 the
-- holding session's idle_session_timeout (text, e.g. '300ms').
--
-- The lock is tried without waiting; only a grant bumps the name's fence counter (the fence fragment:
-- epoch_fence.sql, or fence_flushed.sql for a table without the epoch's tables; committed in
-- this statement's transaction before the answer) and bounds the session's idle time, so a
-- holder that goes silent has its session, and with it the lock, ended by the server.
-- The backend pid comes along for pg_cancel_backend and the tests' fault hooks, and the
-- session's own idle_session_timeout (read before it is changed) for the release to restore.
--
-- A grant marks the session (dlock.held, the key; the release clears it), and a session that
-- carries a mark is not tried at all: its answer names the mark (foreign), and the client
-- refuses it as a transaction-pooling proxy. A session this backend checked out never holds
-- anything of ours, so only a pooler that ran another client's hold on this very server
-- session gives one, and then pg_try_advisory_lock would have granted the key again (it is
-- re-entrant): two clients would hold it.
WITH g AS (SELECT coalesce(current_setting('dlock.held', true), '') AS held),
     l AS (SELECT CASE WHEN g.held = '' THEN pg_try_advisory_lock($1) ELSE false END AS ok,
                   current_setting('idle_session_timeout') AS idle_before, g.held FROM g),
     gr AS (SELECT l.ok AS granted FROM l),
{fence}
SELECT l.ok,
       (SELECT fence FROM f) AS fence,
       CASE WHEN l.ok THEN set_config('idle_session_timeout', $3, false) END AS idle,
       CASE WHEN l.ok THEN set_config('dlock.held', $1::text, false) END AS marked,
       pg_backend_pid() AS pid,
       l.idle_before,
       l.held AS foreign,
       -- Only what `need` says must reach the disk before the answer (epoch_fence.sql).
       set_config('synchronous_commit', CASE WHEN (SELECT bump FROM need) THEN 'on' ELSE 'off' END, true)
         AS durable
FROM l
