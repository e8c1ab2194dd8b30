-- The seed's optimistic business update ("数据库乐观锁"): succeeds only if nobody changed the
-- row since it was read at `version`; the caller re-reads and retries when it fails.
UPDATE `{table}` SET stock = stock - ?, version = version + 1 WHERE id = ? AND version = ?
