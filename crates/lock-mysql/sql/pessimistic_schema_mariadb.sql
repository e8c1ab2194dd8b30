-- Pessimistic mode on MariaDB: one row per lock (locked with SELECT ... FOR UPDATE inside an
-- open transaction), and one SEQUENCE for fencing tokens. NEXTVAL is non-transactional: a value
-- survives the rollback of a crashed holder, never waits behind a held row, and is unique
-- across keys. After a crash-restart the sequence skips its unused cache: still increasing.
CREATE TABLE IF NOT EXISTS `{table}` (
    name VARBINARY(255) NOT NULL PRIMARY KEY
) ENGINE=InnoDB;
CREATE SEQUENCE IF NOT EXISTS `{table}_fence`
