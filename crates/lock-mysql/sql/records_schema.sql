-- Records (lock_core::backend::RecordOp), every mode: per name, one row with mark '' holding
-- the number, and one row per mark token. Kept apart from the lock tables: a record is no lock.
CREATE TABLE IF NOT EXISTS `{table}_recs` (
    name  VARBINARY(255)  NOT NULL,
    mark  VARBINARY(64)   NOT NULL,
    value BIGINT UNSIGNED NULL,
    PRIMARY KEY (name, mark)
) ENGINE=InnoDB
