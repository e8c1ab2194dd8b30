-- Force-unlock: end the live lease whose fence (the row's version) is the inspected one,
-- whatever its owner and nesting, by the database clock. Every later grant bumps the version,
-- so a hold taken since is never the one ended; sent twice, the second finds the row free.
UPDATE `{table}`
   SET owner = NULL, expires_at = UTC_TIMESTAMP(6), attempt = NULL, holds = 0
 WHERE name = ? AND version = ? AND owner IS NOT NULL AND expires_at > UTC_TIMESTAMP(6)
