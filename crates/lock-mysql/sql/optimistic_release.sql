-- Release: CAS on (name, owner, version) of a live lease. The last hold frees the row.
-- Single-table UPDATE assigns left to right, so holds is decremented last.
UPDATE `{table}`
   SET owner = IF(holds > 1, owner, NULL),
       expires_at = IF(holds > 1, expires_at, NULL),
       attempt = IF(holds > 1, attempt, NULL),
       holds = holds - 1
 WHERE name = ? AND owner = ? AND version = ? AND expires_at > UTC_TIMESTAMP(6)
