-- Pessimistic mode, inspecting a hold nobody noted: a row lock is shown nowhere without the
-- PROCESS privilege (and even information_schema.INNODB_LOCKS shows only locks someone waits
-- for), so the row is locked for this one autocommit statement, skipping it if it is held
-- (SKIP LOCKED: MariaDB 10.6+, MySQL 8.0+). No row: held (the row exists, pessimistic_row_exists
-- found it). A NOWAIT attempt of another client in that instant is refused as if held.
SELECT 1 FROM `{table}` WHERE name = ? FOR UPDATE SKIP LOCKED
