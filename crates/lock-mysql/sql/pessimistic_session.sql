-- MySQL. Run once on every connection of the backend's private pool of holding connections,
-- when it is opened (see pessimistic_session_mariadb.sql): the idle bound of a holder, and
-- autocommit off so that the lock statement opens the holding transaction by itself. {idle} is
-- a number of seconds filled in by the backend.
SET SESSION autocommit = 0, wait_timeout = {idle}, net_read_timeout = {idle}, net_write_timeout = {idle}
