-- The number under the name and how many marks.
SELECT (SELECT value FROM `{table}_recs` WHERE name = ? AND mark = '') AS value,
       (SELECT COUNT(*) FROM `{table}_recs` WHERE name = ? AND mark <> '') AS marks
