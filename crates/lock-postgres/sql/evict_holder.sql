-- Force-unlock, second step: end the session that holds the advisory key exclusively (a
-- session lock goes only with its session), waiting up to 5 s for it to go. $1 classid,
-- $2 objid (as in inspect.sql). Needs the holder's role or pg_signal_backend.
SELECT coalesce(bool_or(pg_terminate_backend(pid, 5000)), false)
FROM pg_locks
WHERE locktype = 'advisory'
  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND classid = $1::bigint::oid AND objid = $2::bigint::oid AND objsubid = 1
  AND granted AND mode = 'ExclusiveLock'
