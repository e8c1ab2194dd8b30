-- MariaDB release of the last hold: delete the row (fences come from the sequence, so the
-- key's next row still gets a larger token). CAS on (name, owner, version) of a live lease.
DELETE FROM `{table}`
 WHERE name = ? AND owner = ? AND version = ? AND holds = 1 AND expires_at > UTC_TIMESTAMP(6)
