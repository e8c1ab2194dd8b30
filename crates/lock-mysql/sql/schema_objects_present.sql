-- How many of the schema objects already exist. Read from information_schema, which takes no
-- metadata lock: CREATE SEQUENCE IF NOT EXISTS on an existing sequence waits for an exclusive
-- metadata lock, i.e. for every open transaction that used it (every held pessimistic lock),
-- and blocks everyone queued behind it.
SELECT COUNT(*) FROM information_schema.tables
 WHERE table_schema = DATABASE() AND table_name IN (?, ?)
