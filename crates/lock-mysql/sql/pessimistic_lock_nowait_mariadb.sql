-- Lock the row, or fail at once (1205). The fencing token is drawn in the same statement: the
-- select list is evaluated after the row lock is granted (tokens follow grant order), and
-- NEXTVAL is not undone by a rollback (a crashed holder's token is never handed out again).
-- Sent as a prepared statement, cached per connection, on a holding connection with autocommit
-- off (pessimistic_session_mariadb.sql): it opens the holding transaction itself, so the
-- acquisition is this one round trip. The connection id comes with the grant.
SELECT NEXTVAL(`{table}_fence`), CONNECTION_ID() FROM `{table}` WHERE name = ? FOR UPDATE NOWAIT
