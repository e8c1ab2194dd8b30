-- Force-unlock, first step, in the eviction's transaction: the name's fence, its row locked.
-- A grant in flight (its fence bump not yet committed) is waited for, and none commits until
-- the eviction ends, so the fence compared is the current holder's. $1 the lock name.
SELECT fence FROM {table} WHERE name = $1 FOR UPDATE
