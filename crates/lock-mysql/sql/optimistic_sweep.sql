-- MariaDB: reclaim rows of keys nobody holds (freed, or expired for a minute: a crashed
-- holder), a bounded batch at a time. Tokens come from the sequence and never repeat.
DELETE FROM `{table}`
 WHERE owner IS NULL OR expires_at IS NULL OR expires_at < UTC_TIMESTAMP(6) - INTERVAL 60 SECOND
 LIMIT 100
