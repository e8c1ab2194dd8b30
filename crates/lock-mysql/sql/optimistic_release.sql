-- Release: CAS on (name, owner, version) of a live lease. The last hold frees the row and
-- stamps expires_at with the release time (the sweep deletes rows idle for a while).
-- Single-table UPDATE assigns left to right, so holds is decremented last.
UPDATE `{table}`
   SET owner = IF(holds > 1, owner, NULL),
       expires_at = IF(holds > 1, expires_at, UTC_TIMESTAMP(6)),
       attempt = IF(holds > 1, attempt, NULL),
       holds = holds - 1
 WHERE name = ? AND owner = ? AND version = ? AND expires_at > UTC_TIMESTAMP(6)
