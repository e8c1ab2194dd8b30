-- MySQL: lock the row or fail at once (3572); the fence is drawn afterwards (pessimistic_fence_next.sql).
-- Prepared and cached per connection, on a holding connection with autocommit off
-- (pessimistic_session.sql): it opens the holding transaction itself.
SELECT 0, CONNECTION_ID() FROM `{table}` WHERE name = ? FOR UPDATE NOWAIT
