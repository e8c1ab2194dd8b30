-- One counter row per lock name: the fencing token of its latest grant. It is bumped by the
-- statement that takes the advisory lock, in that statement's own (autocommit) transaction, so
-- it is committed before the grant is answered and survives the holder's crash. Nothing ever
-- decrements it.
CREATE TABLE IF NOT EXISTS {table} (
    name  bytea  NOT NULL PRIMARY KEY,
    fence bigint NOT NULL
)
