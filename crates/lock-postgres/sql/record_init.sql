-- Store the number $2 under $1 unless one is stored (a resent copy stores nothing new).
INSERT INTO {table}_recs (name, mark, value) VALUES ($1, '', $2) ON CONFLICT (name, mark) DO NOTHING
