-- Lock the row, or fail at once (1205). The fencing token is drawn in the same statement: the
-- select list is evaluated after the row lock is granted (tokens follow grant order), and
-- NEXTVAL is not undone by a rollback (a crashed holder's token is never handed out again).
-- Sent as text in one batch after pessimistic_begin_mariadb.sql (one round trip for both);
-- {key} is a hex literal X'..' (hex digits only). The connection id comes with the grant.
SELECT NEXTVAL(`{table}_fence`), CONNECTION_ID() FROM `{table}` WHERE name = {key} FOR UPDATE NOWAIT
