-- Store the number $2 under $1, whatever is stored.
INSERT INTO {table}_recs (name, mark, value) VALUES ($1, '', $2)
    ON CONFLICT (name, mark) DO UPDATE SET value = EXCLUDED.value
