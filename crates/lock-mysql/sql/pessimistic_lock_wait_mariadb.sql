-- Wait in the server's lock queue until the caller's deadline: max_statement_time (seconds,
-- microsecond precision) ends the wait exactly; the whole-second innodb_lock_wait_timeout is
-- rounded up so it never fires first. Both are numbers spliced in by the backend, and so is the
-- key, as a hex literal X'..' (hex digits only): SET STATEMENT takes no placeholders, so this
-- text differs on every call and is sent as one COM_QUERY. A one-off prepared statement would
-- send COM_STMT_EXECUTE and COM_STMT_CLOSE back to back without reading in between; Nagle then
-- holds the next command (the holder's COMMIT) until the server's delayed ACK, ~40 ms later.
SET STATEMENT max_statement_time = {max_statement_time}, innodb_lock_wait_timeout = {lock_wait_timeout} FOR SELECT NEXTVAL(`{table}_fence`) FROM `{table}` WHERE name = {key} FOR UPDATE
