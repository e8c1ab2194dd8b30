-- Cleanup of a cancelled acquisition, sent on the attempt's own connection right after the
-- statement that was in flight (sqlx sends or drains that one first). It undoes one hold of
-- the grant (owner, version) exactly when that statement ran and applied:
--   @dlock_attempt = nonce  some statement of this attempt ran on this connection (each of
--                           them sets it when it applies), so every later one was ours too;
--   ROW_COUNT() > 0         the last one applied (an applied statement of this attempt whose
--                           answer was seen would have ended the attempt);
--   LAST_INSERT_ID()        the version it granted or nested into.
-- So it never touches a later grant or nesting by the same owner, even one that overwrote the
-- attempt column meanwhile. Sent as text (no prepare round trip before it; ROW_COUNT() must
-- see the previous statement): {key}, {owner} and {nonce} are hex literals.
UPDATE `{table}`
   SET owner = IF(holds > 1, owner, NULL),
       expires_at = IF(holds > 1, expires_at, UTC_TIMESTAMP(6)),
       attempt = IF(holds > 1, attempt, NULL),
       holds = IF(holds > 0, holds - 1, 0)
 WHERE name = {key} AND owner = {owner} AND version = LAST_INSERT_ID()
   AND @dlock_attempt = {nonce} AND ROW_COUNT() > 0
