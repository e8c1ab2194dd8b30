-- Autocommit, on a different connection than the holding transaction, after the row lock is
-- granted: fences are handed out in grant order and survive a crashed holder's rollback.
-- LAST_INSERT_ID(expr) puts the new value into the OK packet (no second round trip).
INSERT INTO `{table}_fence` (name, fence) VALUES (?, LAST_INSERT_ID(1))
    ON DUPLICATE KEY UPDATE fence = LAST_INSERT_ID(fence + 1)
