-- Optimistic mode: the note of the current hold only: the row's (owner, version) must be the
-- lock row's, on a lease that runs by the database clock. $1 key.
SELECT n.note FROM `{table}_notes` n
  JOIN `{table}` t ON t.name = n.name AND t.owner = n.owner AND t.version = n.version
 WHERE n.name = ? AND n.kind = 3 AND t.expires_at > UTC_TIMESTAMP(6)
