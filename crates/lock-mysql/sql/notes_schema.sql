-- Notes on holds, every mode: a holder's short public note (a leader's identity) for observers.
-- kind is the mode that wrote the row (1 pessimistic, 2 named, 3 optimistic): the pessimistic
-- and named modes of one table share its name and hold a key independently of each other.
-- The session modes never commit a row (notes_session_insert.sql); an optimistic row carries the
-- (owner, version) of the hold it belongs to (notes_optimistic_set.sql). note is the UTF-8 text,
-- at most 1024 bytes (lock-core's MAX_NOTE_BYTES), stored as bytes so no charset can alter it.
CREATE TABLE IF NOT EXISTS `{table}_notes` (
    name    VARBINARY(255)   NOT NULL,
    kind    TINYINT UNSIGNED NOT NULL,
    owner   BINARY(16)       NULL,
    version BIGINT UNSIGNED  NULL,
    note    VARBINARY(1024)  NOT NULL,
    PRIMARY KEY (name, kind)
) ENGINE=InnoDB
