-- Store the number under the name, whatever is stored.
INSERT INTO `{table}_records` (name, mark, value) VALUES (?, '', ?) ON DUPLICATE KEY UPDATE value = VALUES(value)
