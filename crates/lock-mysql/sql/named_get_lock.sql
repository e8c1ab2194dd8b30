-- Named mode, MySQL: as named_get_lock_mariadb.sql, but MySQL has no sequence: a grant answers
-- 1 and the backend draws the fencing token afterwards on the same (autocommit) connection with
-- pessimistic_fence_next.sql. Unverified on a real MySQL server (the tests run MariaDB).
SELECT CASE GET_LOCK({name}, {timeout}) WHEN 1 THEN 1 WHEN 0 THEN 0 ELSE -1 END, CONNECTION_ID()
