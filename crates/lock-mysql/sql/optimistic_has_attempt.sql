-- Whether the lock table has the attempt column (read without a metadata lock).
SELECT COUNT(*) FROM information_schema.columns
 WHERE table_schema = DATABASE() AND table_name = ? AND column_name = 'attempt'
