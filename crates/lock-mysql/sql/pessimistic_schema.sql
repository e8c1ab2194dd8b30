-- Pessimistic mode on MySQL: one row per lock (locked with SELECT ... FOR UPDATE inside an open
-- transaction), and a separate fence counter per lock, bumped in autocommit so that it
-- survives the rollback of a crashed holder and never waits behind a held row.
CREATE TABLE IF NOT EXISTS `{table}` (
    name VARBINARY(255) NOT NULL PRIMARY KEY
) ENGINE=InnoDB;
CREATE TABLE IF NOT EXISTS `{table}_fence` (
    name  VARBINARY(255)  NOT NULL PRIMARY KEY,
    fence BIGINT UNSIGNED NOT NULL
) ENGINE=InnoDB
