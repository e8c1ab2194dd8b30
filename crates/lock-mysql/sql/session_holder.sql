-- Session modes: who holds {key} without taking it, read uncommitted (a holder never commits
-- its note row, notes_session_insert.sql) in one text packet; the isolation level is for the
-- next transaction only, so the pooled connection keeps its own. Answers the connection the
-- server shows holding the key ({holder}: IS_USED_LOCK of the name in named mode, NULL in
-- pessimistic mode, where a row lock is not shown), and the noted hold's fence and connection,
-- if its holder noted it. {key} is a hex literal, {kind} a number, {holder} an expression,
-- all filled in by the backend.
SET TRANSACTION ISOLATION LEVEL READ UNCOMMITTED;
SELECT CAST(h.conn AS SIGNED) AS conn,
       CAST(n.version AS SIGNED) AS fence,
       CAST(CONV(HEX(n.owner), 16, 10) AS SIGNED) AS noted
  FROM (SELECT {holder} AS conn) h
  LEFT JOIN `{table}_notes` n ON n.name = {key} AND n.kind = {kind} AND n.version IS NOT NULL
