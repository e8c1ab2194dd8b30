-- Whether the fence epoch's tables ($1, $2) exist and this role may use them (epoch_fence.sql
-- reads, inserts and updates both). Without them, grants flush their fences one by one.
SELECT coalesce(bool_and(to_regclass(t) IS NOT NULL
                         AND has_table_privilege(to_regclass(t), 'SELECT, INSERT, UPDATE')), false)
FROM unnest(ARRAY[$1, $2]::text[]) AS t
