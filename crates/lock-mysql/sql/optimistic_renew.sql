-- Renew: CAS on (name, owner, version) of a live lease.
UPDATE `{table}` SET expires_at = NOW(6) + INTERVAL ? MICROSECOND
 WHERE name = ? AND owner = ? AND version = ? AND expires_at > NOW(6)
