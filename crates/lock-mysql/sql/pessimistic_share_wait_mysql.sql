-- MySQL: wait in the server's lock queue for a shared lock of the row until the caller's
-- deadline; as pessimistic_lock_wait_mysql.sql (unverified on a real MySQL server likewise).
SELECT /*+ MAX_EXECUTION_TIME({max_execution_ms}) */ 0 FROM `{table}` WHERE name = {key} FOR SHARE
