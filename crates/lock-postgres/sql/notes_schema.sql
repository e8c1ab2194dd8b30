-- The note columns for a fence table made by an older version (needs the table's owner).
-- ADD COLUMN of a nullable column without a default rewrites nothing.
ALTER TABLE {table}
    ADD COLUMN IF NOT EXISTS note_fence bigint NULL,
    ADD COLUMN IF NOT EXISTS note_pid integer NULL,
    ADD COLUMN IF NOT EXISTS note text NULL
