-- First use of a lock: create the row already held (version 1).
INSERT IGNORE INTO `{table}` (name, owner, version, holds, expires_at, attempt)
VALUES (?, ?, LAST_INSERT_ID(1), 1, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, (@dlock_attempt := ?))
