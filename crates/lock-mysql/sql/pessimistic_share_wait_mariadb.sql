-- MariaDB: wait in the server's lock queue for a shared lock of the row until the caller's
-- deadline; as pessimistic_lock_wait_mariadb.sql (the same spliced numbers and hex key, sent as
-- one COM_QUERY), drawing no fence.
SET STATEMENT max_statement_time = {max_statement_time}, innodb_lock_wait_timeout = {lock_wait_timeout} FOR SELECT 0 FROM `{table}` WHERE name = {key} LOCK IN SHARE MODE
