-- MySQL: lock the row or fail at once (3572); the fence is drawn afterwards (pessimistic_fence_next.sql).
-- Sent as text in one batch after pessimistic_begin.sql; {key} is a hex literal X'..'.
SELECT 0, CONNECTION_ID() FROM `{table}` WHERE name = {key} FOR UPDATE NOWAIT
