-- MySQL. Run once on every connection of the backend's private pool of holding connections,
-- when it is opened (see pessimistic_session_mariadb.sql): the idle bound of a holder, and
-- autocommit off so that the lock statement opens the holding transaction by itself. {idle} is
-- a number of seconds filled in by the backend.
SET SESSION autocommit = 0, wait_timeout = {idle}, net_read_timeout = {idle}, net_write_timeout = {idle};
-- READ COMMITTED: a locking read of a missing row takes no gap lock, which under REPEATABLE
-- READ made many clients creating new keys at once give way to each other again and again.
-- A hold reads nothing but its own row, whose lock is the same at either level.
SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED
