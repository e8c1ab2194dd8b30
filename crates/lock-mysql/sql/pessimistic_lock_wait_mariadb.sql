SET STATEMENT max_statement_time = {max_statement_time}, innodb_lock_wait_timeout = {lock_wait_timeout} FOR SELECT 1 FROM `{table}` WHERE name = ? FOR UPDATE
