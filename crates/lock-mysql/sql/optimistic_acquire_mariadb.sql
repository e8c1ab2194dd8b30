-- MariaDB acquire in one statement and one round trip when the row exists: take it if it is
-- free or its lease has expired by the database clock (UTC). RETURNING answers the row as it
-- stands afterwards: attempt = this attempt's nonce means it won (version is the fencing token,
-- drawn from the sequence); otherwise owner and the remaining lease say who holds it and for how
-- long (the reentrant nesting and the waiter's hint).
--
-- The fence is drawn only in the update branch, which runs with the row locked: grants of a key
-- are serialised by that lock, so their fences increase in grant order. A value drawn in the
-- VALUES list is drawn when the statement starts, before it waits for the row: a statement that
-- drew, waited while others took, used and released the key, then created the row, granted a
-- fence below the one before (measured: 11 in 5,918 contended grants, `tests/fences.rs`). So a
-- missing row is created free (expires_at is its creation time, for the sweep) and taken by the
-- attempt's next round: a key's first use costs a second round trip, later ones do not (rows
-- stay after release until the sweep finds them idle).
--
-- The cleanup of a cut-off attempt (optimistic_cancel_here_mariadb.sql) asks the session:
-- @dlock_attempt is this nonce exactly when the statement applied (the VALUES list always
-- clears it; the update branch sets it when the row was free), and LAST_INSERT_ID() is the
-- version it granted. The free test runs once, in the first assignment (attempt), before any
-- column it reads changes; the later assignments reuse it.
--
-- Binds: name, nonce, owner, lease (µs).
INSERT INTO `{table}` (name, owner, version, holds, expires_at, attempt)
VALUES (?, NULL, 0, 0, UTC_TIMESTAMP(6), (@dlock_attempt := NULL))
ON DUPLICATE KEY UPDATE
    attempt = IF(@dlock_free := (owner IS NULL OR expires_at IS NULL OR expires_at <= UTC_TIMESTAMP(6)),
                 (@dlock_attempt := ?), attempt),
    owner = IF(@dlock_free, ?, owner),
    version = IF(@dlock_free, LAST_INSERT_ID(NEXTVAL(`{table}_fence`)), version),
    holds = IF(@dlock_free, 1, holds),
    expires_at = IF(@dlock_free, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, expires_at)
RETURNING owner, version, attempt, TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at)
