-- The number and every mark under $1.
DELETE FROM {table}_records WHERE name = $1
