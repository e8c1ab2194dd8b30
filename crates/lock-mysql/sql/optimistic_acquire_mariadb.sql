-- MariaDB acquire in one statement and one round trip, whether the row exists or not: insert
-- the row already held, or take the existing row if it is free or its lease has expired by the
-- database clock (UTC). RETURNING answers the row as it stands afterwards: attempt = this
-- attempt's nonce means it won (version is the fencing token, drawn from the sequence);
-- otherwise owner and the remaining lease say who holds it and for how long (the reentrant
-- nesting and the waiter's hint).
--
-- The cleanup of a cut-off attempt (optimistic_cancel_here_mariadb.sql) asks the session:
-- @dlock_attempt is this nonce exactly when the statement applied (the VALUES list always sets
-- it; the update branch clears it when the row is held), and LAST_INSERT_ID() is the version it
-- granted. The free test runs once, in the first assignment (attempt), before any column it
-- reads changes; the later assignments reuse it. The VALUES list draws a sequence value even on
-- a held row: tokens stay strictly increasing, some are skipped.
INSERT INTO `{table}` (name, owner, version, holds, expires_at, attempt)
VALUES (?, ?, LAST_INSERT_ID(NEXTVAL(`{table}_fence`)), 1, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND,
        (@dlock_attempt := ?))
ON DUPLICATE KEY UPDATE
    attempt = IF(@dlock_free := (owner IS NULL OR expires_at IS NULL OR expires_at <= UTC_TIMESTAMP(6)),
                 VALUE(attempt), IF(@dlock_attempt := NULL, NULL, attempt)),
    owner = IF(@dlock_free, VALUE(owner), owner),
    version = IF(@dlock_free, LAST_INSERT_ID(NEXTVAL(`{table}_fence`)), version),
    holds = IF(@dlock_free, 1, holds),
    expires_at = IF(@dlock_free, VALUE(expires_at), expires_at)
RETURNING owner, version, attempt, TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at)
