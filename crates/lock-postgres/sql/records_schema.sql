-- Records (lock_core::backend::RecordOp): per name, one row with mark '' holding the number,
-- and one row per mark token. Kept apart from the fence table: a record is no lock. Created
-- like the fence table, serialised by a transaction-scoped advisory lock on its name.
BEGIN;
SELECT pg_advisory_xact_lock(hashtext('{table}_recs'), 0);
CREATE TABLE IF NOT EXISTS {table}_recs (
    name  bytea  NOT NULL,
    mark  text   NOT NULL,
    value bigint NULL,
    PRIMARY KEY (name, mark)
);
COMMIT;
