-- Optimistic mode on MySQL: a lease per lock, judged by the database clock (NOW(6)).
-- version is bumped on every acquisition and is the fencing token.
CREATE TABLE IF NOT EXISTS `{table}` (
    name       VARBINARY(255)  NOT NULL PRIMARY KEY,
    owner      BINARY(16)      NULL,
    version    BIGINT UNSIGNED NOT NULL DEFAULT 0,
    holds      INT UNSIGNED    NOT NULL DEFAULT 0,
    expires_at DATETIME(6)     NULL
) ENGINE=InnoDB
