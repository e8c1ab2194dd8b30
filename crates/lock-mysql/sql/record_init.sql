-- Store the number under the name unless one is stored (a resent copy stores nothing new).
INSERT IGNORE INTO `{table}_recs` (name, mark, value) VALUES (?, '', ?)
