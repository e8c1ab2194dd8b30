-- Named mode on MariaDB: GET_LOCK needs no table; only the fence sequence, the same one the
-- pessimistic mode of this table uses (so tokens increase across both modes).
CREATE SEQUENCE IF NOT EXISTS `{table}_fence`
