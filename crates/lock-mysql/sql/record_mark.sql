-- Add the mark under the name while a number is stored there (a resent copy finds its row).
INSERT IGNORE INTO `{table}_recs` (name, mark)
    SELECT ?, ? FROM DUAL WHERE EXISTS (SELECT 1 FROM `{table}_recs` WHERE name = ? AND mark = '')
