-- Renew: CAS on (name, owner, version) of a live lease. The expiry only ever moves later: a
-- nested hold or the watchdog may renew with a shorter lease than another hold still has.
UPDATE `{table}` SET expires_at = GREATEST(expires_at, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND)
 WHERE name = ? AND owner = ? AND version = ? AND expires_at > UTC_TIMESTAMP(6)
