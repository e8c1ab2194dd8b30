-- The number and every mark under the name.
DELETE FROM `{table}_records` WHERE name = ?
