-- Upgrade of a table from before UTC leases, run only once every old client has stopped: add
-- the attempt column (instant in InnoDB) and free every lease (they belonged to the stopped
-- clients, and their expiry times were written in session time zones, unreadable as UTC).
-- version stays, so fencing tokens keep increasing (MySQL: per row; MariaDB: the sequence).
ALTER TABLE `{table}` ADD COLUMN attempt BINARY(16) NULL;
UPDATE `{table}` SET owner = NULL, expires_at = NULL, holds = 0
