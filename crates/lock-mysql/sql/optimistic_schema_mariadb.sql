-- Optimistic mode on MariaDB: a lease per lock, judged by the database clock (NOW(6)), and
-- one SEQUENCE whose next value becomes the row's version on every acquisition: the version
-- is the fencing token, strictly increasing per lock and unique across locks.
CREATE TABLE IF NOT EXISTS `{table}` (
    name       VARBINARY(255)  NOT NULL PRIMARY KEY,
    owner      BINARY(16)      NULL,
    version    BIGINT UNSIGNED NOT NULL DEFAULT 0,
    holds      INT UNSIGNED    NOT NULL DEFAULT 0,
    expires_at DATETIME(6)     NULL
) ENGINE=InnoDB;
CREATE SEQUENCE IF NOT EXISTS `{table}_fence`
