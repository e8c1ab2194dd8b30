-- One attempt, one round trip. $1 the advisory key (bigint), $2 the lock name (bytea), $3 the
-- holding session's idle_session_timeout (text, e.g. '300ms').
--
-- The lock is tried without waiting; only a grant bumps the name's fence counter (in this
-- statement's transaction: committed before the answer) and bounds the session's idle time,
-- so a holder that goes silent has its session, and with it the lock, ended by the server.
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
     f AS (INSERT INTO {table} AS t (name, fence) SELECT $2, 1 FROM l WHERE l.ok
           ON CONFLICT (name) DO UPDATE SET fence = t.fence + 1
           RETURNING t.fence)
SELECT l.ok,
       (SELECT fence FROM f) AS fence,
       CASE WHEN l.ok THEN set_config('idle_session_timeout', $3, false) END AS idle,
       CASE WHEN l.ok THEN set_config('dlock.held', $1::text, false) END AS marked,
       pg_backend_pid() AS pid,
       l.idle_before,
       l.held AS foreign,
       -- The fence must outlive a server crash whatever the role's default: a lost bump
       -- would hand the next holder a token already used.
       set_config('synchronous_commit', 'on', true) AS durable
FROM l
