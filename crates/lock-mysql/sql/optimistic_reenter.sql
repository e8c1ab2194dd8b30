-- Reentrant nesting by the same owner: one more hold, lease extended, version unchanged.
UPDATE `{table}`
   SET holds = holds + 1,
       expires_at = GREATEST(expires_at, NOW(6) + INTERVAL ? MICROSECOND)
 WHERE name = ? AND owner = ? AND version = ? AND expires_at > NOW(6)
