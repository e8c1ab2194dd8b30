-- MySQL: MAX_EXECUTION_TIME (ms) ends the wait at the caller's deadline (waits longer than
-- innodb_lock_wait_timeout end early with 1205 and are retried by the core). Unverified on a
-- real MySQL server; the client's KILL QUERY after the deadline is the safety net. The key is
-- spliced in as a hex literal X'..' and the text sent as one COM_QUERY (see
-- pessimistic_lock_wait_mariadb.sql for why not a one-off prepared statement).
SELECT /*+ MAX_EXECUTION_TIME({max_execution_ms}) */ 0 FROM `{table}` WHERE name = {key} FOR UPDATE
