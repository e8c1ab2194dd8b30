-- MySQL: a shared lock of the row (the read side of a read-write lock), or fail at once
-- (3572). A shared hold draws no fence. InnoDB queues a shared request behind a waiting
-- exclusive one, so with a writer waiting this fails too: writers are not starved.
-- Prepared, on a holding connection with autocommit off: it opens the holding transaction.
SELECT 0, CONNECTION_ID() FROM `{table}` WHERE name = ? FOR SHARE NOWAIT
