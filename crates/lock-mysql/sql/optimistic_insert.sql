-- First use of a lock: create the row already held (version 1).
INSERT IGNORE INTO `{table}` (name, owner, version, holds, expires_at)
VALUES (?, ?, LAST_INSERT_ID(1), 1, NOW(6) + INTERVAL ? MICROSECOND)
