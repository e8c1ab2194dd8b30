-- Session modes on MySQL, force-unlock, first step (MySQL has no anonymous compound statement
-- to run the check and the KILL together, as session_evict_mariadb.sql does): the connection of
-- the hold of {key} whose fence is {fence}, as its note row names it; the backend then sends
-- KILL CONNECTION with it, one round trip later. Unverified on a real MySQL server (the tests
-- run MariaDB). Placeholders as in session_evict_mariadb.sql.
SET TRANSACTION ISOLATION LEVEL READ UNCOMMITTED;
SELECT CAST(CONV(HEX(owner), 16, 10) AS SIGNED) FROM `{table}_notes`
 WHERE name = {key} AND kind = {kind} AND version = {fence} {check}
