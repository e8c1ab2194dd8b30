-- Named mode on MySQL: GET_LOCK needs no table; only the per-key fence counter, the same one
-- the pessimistic mode of this table uses (so a key's tokens increase across both modes).
CREATE TABLE IF NOT EXISTS `{table}_fence` (
    name  VARBINARY(255)  NOT NULL PRIMARY KEY,
    fence BIGINT UNSIGNED NOT NULL
) ENGINE=InnoDB
