-- Whether the lock table exists (columns > 0) and has the attempt column of UTC leases; read
-- from information_schema, without a metadata lock.
SELECT COUNT(*), COUNT(IF(column_name = 'attempt', 1, NULL)) FROM information_schema.columns
 WHERE table_schema = DATABASE() AND table_name = ?
