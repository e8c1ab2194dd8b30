-- Only sent after pessimistic_row_exists.sql found no row. If another client created the row
-- and locked it in between, a plain INSERT IGNORE would wait for the holder (up to the whole
-- innodb_lock_wait_timeout); 0 makes it give up at once (the row then exists: go lock it).
SET STATEMENT innodb_lock_wait_timeout = 0 FOR INSERT IGNORE INTO `{table}` (name) VALUES (?)
