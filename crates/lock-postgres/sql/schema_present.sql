-- Whether the fence table exists, whether it has the note columns (a table made by an older
-- version has not), and whether the records table exists, so `build` sends no DDL when all are
-- there.
SELECT to_regclass($1) IS NOT NULL,
       EXISTS (SELECT 1 FROM pg_attribute
                WHERE attrelid = to_regclass($1) AND attname = 'note_pid' AND NOT attisdropped),
       to_regclass($2) IS NOT NULL
