-- Sent on the same connection right after the statement of a cancelled acquisition (so after it,
-- whether it was applied or not): undoes that attempt's hold if its nonce is still the last one
-- recorded. A first acquisition frees the row; a nesting gives back its one hold. Assignments
-- run left to right, so holds is decremented last.
UPDATE `{table}`
   SET owner = IF(holds > 1, owner, NULL),
       expires_at = IF(holds > 1, expires_at, NULL),
       attempt = NULL,
       holds = IF(holds > 0, holds - 1, 0)
 WHERE name = ? AND attempt = ?
