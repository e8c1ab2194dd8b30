-- Look without taking: holders and waiters of the advisory key in this database (pg_locks
-- shows a bigint key as classid = high 32 bits, objid = low 32 bits, objsubid = 1), and the
-- name's latest fence. $1 classid, $2 objid, $3 the lock name. Shared holds show as mode
-- ShareLock.
SELECT count(*) FILTER (WHERE granted) AS holders,
       count(*) FILTER (WHERE granted AND mode = 'ShareLock') AS readers,
       count(*) FILTER (WHERE NOT granted) AS waiters,
       (SELECT fence FROM {table} WHERE name = $3) AS fence
FROM pg_locks
WHERE locktype = 'advisory'
  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND classid = $1::bigint::oid AND objid = $2::bigint::oid AND objsubid = 1
