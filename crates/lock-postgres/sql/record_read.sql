-- The number under $1 and how many marks.
SELECT (SELECT value FROM {table}_recs WHERE name = $1 AND mark = '') AS value,
       (SELECT count(*) FROM {table}_recs WHERE name = $1 AND mark <> '') AS marks
