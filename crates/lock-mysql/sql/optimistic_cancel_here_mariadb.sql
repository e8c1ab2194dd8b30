-- MariaDB: cleanup of a cancelled acquisition on the attempt's own connection, right after the
-- statement that was in flight (sqlx sends or drains that one first). The statements of a
-- MariaDB attempt (optimistic_acquire_mariadb.sql, optimistic_reenter.sql) leave
-- @dlock_attempt = nonce exactly when one of them applied, and LAST_INSERT_ID() = the version
-- it granted or nested into; the row count is not tested (a statement with RETURNING leaves it
-- at -1).
-- It gives back one hold of (owner, version) only then, so it never touches a later grant or
-- nesting by the same owner, even one that overwrote the attempt column meanwhile. Sent as
-- text: {key}, {owner} and {nonce} are hex literals.
UPDATE `{table}`
   SET owner = IF(holds > 1, owner, NULL),
       expires_at = IF(holds > 1, expires_at, UTC_TIMESTAMP(6)),
       attempt = IF(holds > 1, attempt, NULL),
       holds = IF(holds > 0, holds - 1, 0)
 WHERE name = {key} AND owner = {owner} AND version = LAST_INSERT_ID()
   AND @dlock_attempt = {nonce}
