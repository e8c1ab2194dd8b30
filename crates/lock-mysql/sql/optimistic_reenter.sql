-- Reentrant nesting by the same owner: one more hold, the lease only ever extended, version
-- unchanged; the attempt nonce is this nesting's.
UPDATE `{table}`
   SET holds = holds + 1, attempt = (@dlock_attempt := ?), version = LAST_INSERT_ID(version),
       expires_at = GREATEST(expires_at, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND)
 WHERE name = ? AND owner = ? AND version = ? AND expires_at > UTC_TIMESTAMP(6)
