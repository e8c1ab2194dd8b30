-- Add the mark $2 under $1 while a number is stored there (a resent copy finds its row).
INSERT INTO {table}_recs (name, mark)
    SELECT $1, $2 WHERE EXISTS (SELECT 1 FROM {table}_recs WHERE name = $1 AND mark = '')
    ON CONFLICT (name, mark) DO NOTHING
