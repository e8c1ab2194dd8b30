-- The fence of a lock taken in a caller's transaction, drawn in its own autocommit statement on
-- another connection while that transaction holds the key (so no grant bumps it meanwhile),
-- as try_lock.sql draws a grant's. $1 the lock name (the fragment's $2, renamed).
WITH gr AS (SELECT true AS granted),
{fence}
SELECT (SELECT fence FROM f),
       set_config('synchronous_commit', CASE WHEN (SELECT bump FROM need) THEN 'on' ELSE 'off' END, true)
         AS durable
