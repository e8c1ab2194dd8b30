-- MySQL: lock the row or fail at once (3572); the fence is drawn afterwards (pessimistic_fence_next.sql).
SELECT 0 FROM `{table}` WHERE name = ? FOR UPDATE NOWAIT
