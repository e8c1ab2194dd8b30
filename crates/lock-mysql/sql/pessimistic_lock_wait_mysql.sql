SELECT /*+ MAX_EXECUTION_TIME({max_execution_ms}) */ 1 FROM `{table}` WHERE name = ? FOR UPDATE
