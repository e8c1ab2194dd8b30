-- Acquire: one conditional statement. Takes the row only when it is free or its lease has
-- expired by the database clock (UTC). rows_affected = 1 means we won; the new version (the
-- fencing token) comes back in the OK packet through LAST_INSERT_ID(expr).
UPDATE `{table}`
   SET owner = ?, version = LAST_INSERT_ID(version + 1), holds = 1, attempt = (@dlock_attempt := ?),
       expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND
 WHERE name = ? AND (owner IS NULL OR expires_at IS NULL OR expires_at <= UTC_TIMESTAMP(6))
