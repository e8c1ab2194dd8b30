-- First use of a lock: create the row already held.
INSERT IGNORE INTO `{table}` (name, owner, version, holds, expires_at)
VALUES (?, ?, LAST_INSERT_ID(NEXTVAL(`{table}_fence`)), 1, NOW(6) + INTERVAL ? MICROSECOND)
