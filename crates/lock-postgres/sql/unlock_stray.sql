-- After a lock wait that failed: the failure may have come after the grant (the fence write
-- waited past lock_timeout for a row or table lock, a statement_timeout, a cancel), and a
-- session advisory lock outlives the failed statement's transaction. Undo this session's grant
-- of the key, if it has one (exclusive, or shared: mode ShareLock), so the connection can go
-- back to the pool. $1 the advisory key, $2 classid, $3 objid (the key as pg_locks shows it).
SELECT CASE WHEN mode = 'ShareLock' THEN pg_advisory_unlock_shared($1) ELSE pg_advisory_unlock($1) END
  FROM pg_locks
 WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted
   AND classid = $2::bigint::oid AND objid = $3::bigint::oid AND objsubid = 1
