-- One counter row per lock name: the fencing token of its latest grant. It is bumped by the
-- statement that takes the advisory lock, in that statement's own (autocommit) transaction, so
-- it is committed before the grant is answered and survives the holder's crash. Nothing ever
-- decrements it. The note columns carry a holder's public note (notes_set.sql).
--
-- Two concurrent `CREATE TABLE IF NOT EXISTS` can both miss the table and one then fails on
-- pg_type's unique index (seen when tests built locks in parallel): one transaction-scoped
-- advisory lock per table name serialises them. The two-int form never meets the locks' own
-- single-bigint keys.
BEGIN;
SELECT pg_advisory_xact_lock(hashtext('{table}'), 0);
CREATE TABLE IF NOT EXISTS {table} (
    name       bytea   NOT NULL PRIMARY KEY,
    fence      bigint  NOT NULL,
    -- The holder's note (notes_set.sql): the hold's fence and backend pid.
    note_fence bigint  NULL,
    note_pid   integer NULL,
    note       text    NULL
);
COMMIT;
