-- Only sent after pessimistic_row_exists.sql found no row: INSERT IGNORE on a row another
-- transaction holds FOR UPDATE would block for the whole innodb_lock_wait_timeout.
INSERT IGNORE INTO `{table}` (name) VALUES (?)
