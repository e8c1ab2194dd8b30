-- Wait in the server's lock queue until the caller's deadline: max_statement_time (seconds,
-- microsecond precision) ends the wait exactly; the whole-second innodb_lock_wait_timeout is
-- rounded up so it never fires first. Both are numbers spliced in by the backend.
SET STATEMENT max_statement_time = {max_statement_time}, innodb_lock_wait_timeout = {lock_wait_timeout} FOR SELECT NEXTVAL(`{table}_fence`) FROM `{table}` WHERE name = ? FOR UPDATE
