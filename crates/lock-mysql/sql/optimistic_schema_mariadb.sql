-- Optimistic mode on MariaDB: a lease per lock, judged by the database clock in UTC
-- (UTC_TIMESTAMP(6): the same for every session, whatever its time_zone, and across DST), and
-- one SEQUENCE whose next value becomes the row's version on every acquisition: the version is
-- the fencing token, strictly increasing per lock and unique across locks, so rows of unused
-- keys can be deleted without a token ever repeating. attempt is the nonce of the last
-- acquisition, so the cleanup of a cancelled attempt undoes exactly that attempt.
CREATE TABLE IF NOT EXISTS `{table}` (
    name       VARBINARY(255)  NOT NULL PRIMARY KEY,
    owner      BINARY(16)      NULL,
    version    BIGINT UNSIGNED NOT NULL DEFAULT 0,
    holds      INT UNSIGNED    NOT NULL DEFAULT 0,
    expires_at DATETIME(6)     NULL,
    attempt    BINARY(16)      NULL
) ENGINE=InnoDB;
CREATE SEQUENCE IF NOT EXISTS `{table}_fence`
