-- Session modes on MariaDB, force-unlock: end the session of the hold of {key} whose fence is
-- {fence}, as its note row names it (notes_session_insert.sql), in one statement: the check
-- and the KILL run back to back in the server, so the window in which the inspected hold
-- could end and its connection take another hold before the KILL is the server's time between
-- two statements of one block, not a round trip. A session lock goes only with its session:
-- KILL CONNECTION ends it (the server rolls the note back and frees the row or the name). The
-- row exists only while its hold lasts (it is never committed), and {check} adds, in named
-- mode, that the server shows that connection holding the name. Answers the connection ended,
-- or NULL when no such hold exists. A connection of another user needs CONNECTION ADMIN (or
-- SUPER): error 1095 otherwise. {key} a hex literal, {kind} and {fence} numbers, {check} a
-- condition, all filled in by the backend.
SET TRANSACTION ISOLATION LEVEL READ UNCOMMITTED;
BEGIN NOT ATOMIC
  DECLARE c BIGINT UNSIGNED DEFAULT NULL;
  DECLARE CONTINUE HANDLER FOR NOT FOUND SET c = NULL;
  SELECT CAST(CONV(HEX(owner), 16, 10) AS UNSIGNED) INTO c FROM `{table}_notes`
   WHERE name = {key} AND kind = {kind} AND version = {fence} {check};
  IF c IS NOT NULL THEN
    KILL CONNECTION c;
  END IF;
  SELECT CAST(c AS SIGNED);
END
