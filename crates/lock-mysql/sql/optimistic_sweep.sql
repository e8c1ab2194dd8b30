-- MariaDB: reclaim rows of keys idle for ten seconds by the database clock (released, expired
-- or created and never taken: expires_at is the time of the last of these; NULL only in rows a
-- client before this one freed), a bounded batch at a time. A held row's expires_at is in the
-- future, so it is never touched. Tokens come from the sequence, drawn under the row's lock,
-- and never repeat: a key whose row came and went starts above every earlier fence. Rows are
-- not deleted at release: the next use would create the row free and take it in a second round
-- trip (see optimistic_acquire_mariadb.sql), and a key in use stays in use.
DELETE FROM `{table}`
 WHERE expires_at IS NULL OR expires_at < UTC_TIMESTAMP(6) - INTERVAL 10 SECOND
 LIMIT 1024
