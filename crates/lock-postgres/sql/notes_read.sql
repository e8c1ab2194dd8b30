-- The current holder's note: only a row that names the name's latest grant (note_fence =
-- fence: every later grant of the name bumps fence) and a backend that holds the advisory key
-- now (pg_locks, granted, that pid). A released, killed or restarted holder's row fails one of
-- the two. $1 classid, $2 objid (the key as pg_locks shows it), $3 the lock name.
SELECT t.note FROM {table} t
 WHERE t.name = $3 AND t.note IS NOT NULL AND t.note_fence = t.fence
   AND EXISTS (SELECT 1 FROM pg_locks l
                WHERE l.locktype = 'advisory'
                  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
                  AND l.classid = $1::bigint::oid AND l.objid = $2::bigint::oid AND l.objsubid = 1
                  AND l.granted AND l.pid = t.note_pid)
