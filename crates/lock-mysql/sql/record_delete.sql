-- The number and every mark under the name.
DELETE FROM `{table}_recs` WHERE name = ?
