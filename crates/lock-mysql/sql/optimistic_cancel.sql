-- Fallback cleanup of a cancelled acquisition whose own connection broke, sent on another
-- connection: undoes that attempt's hold if its nonce is still the last one recorded (a later
-- nesting by the same owner overwrites it; the lease then ends that hold). A first acquisition
-- frees the row; a nesting gives back its one hold. Assignments run left to right, so holds is
-- decremented last.
UPDATE `{table}`
   SET owner = IF(holds > 1, owner, NULL),
       expires_at = IF(holds > 1, expires_at, UTC_TIMESTAMP(6)),
       attempt = IF(holds > 1, attempt, NULL),
       holds = IF(holds > 0, holds - 1, 0)
 WHERE name = ? AND attempt = ?
