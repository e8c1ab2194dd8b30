-- Whether the fence table exists (so `build` sends no DDL when it does).
SELECT to_regclass($1) IS NOT NULL
