-- Session modes: the current holder's note, read uncommitted (the holder never commits it). The
-- isolation level is for the next transaction only, this SELECT in autocommit; both statements
-- go in one text packet, so the server runs them together and the pooled connection keeps its
-- own level. {key} is a hex literal X'..' and {kind} a number, filled in by the backend.
SET TRANSACTION ISOLATION LEVEL READ UNCOMMITTED;
SELECT note FROM `{table}_notes` WHERE name = {key} AND kind = {kind}
