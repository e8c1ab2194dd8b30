-- The fence of a lock taken in a caller's transaction, drawn in its own autocommit statement on
-- another connection while that transaction holds the key (so no grant bumps it meanwhile),
-- and committed durably before it is answered, as try_lock.sql does. $1 the lock name.
INSERT INTO {table} AS t (name, fence) VALUES ($1, 1)
ON CONFLICT (name) DO UPDATE SET fence = t.fence + 1
RETURNING t.fence, set_config('synchronous_commit', 'on', true) AS durable
