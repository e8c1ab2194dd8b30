-- Store the number under the name, whatever is stored.
INSERT INTO `{table}_recs` (name, mark, value) VALUES (?, '', ?) ON DUPLICATE KEY UPDATE value = VALUES(value)
