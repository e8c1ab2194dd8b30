-- The fence's epoch (epoch_fence.sql): a durable counter, and its copy in an UNLOGGED table,
-- which the server empties after every crash recovery (and a standby's promotion and a
-- restored backup start it empty), while a clean shutdown keeps it. Created like the fence
-- table, serialised by a transaction-scoped advisory lock on its name.
BEGIN;
SELECT pg_advisory_xact_lock(hashtext('{table}_epoch'), 0);
CREATE TABLE IF NOT EXISTS {table}_epoch (
    one   boolean NOT NULL PRIMARY KEY DEFAULT true CHECK (one),
    epoch bigint  NOT NULL
);
CREATE UNLOGGED TABLE IF NOT EXISTS {table}_boot (
    one   boolean NOT NULL PRIMARY KEY DEFAULT true CHECK (one),
    epoch bigint  NOT NULL
);
COMMIT;
