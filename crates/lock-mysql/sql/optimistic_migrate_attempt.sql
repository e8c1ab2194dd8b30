-- Tables created before the attempt nonce existed get the column (instant in InnoDB).
ALTER TABLE `{table}` ADD COLUMN attempt BINARY(16) NULL
