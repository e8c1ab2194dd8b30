-- The number and every mark under $1.
DELETE FROM {table}_recs WHERE name = $1
