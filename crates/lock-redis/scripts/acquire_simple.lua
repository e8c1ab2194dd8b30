-- Simple mode acquire: SET NX PX plus the fencing counter, atomically; a lock handed over to
-- this waiter (handoff.lua) is claimed; a waiting attempt that finds the key held registers.
-- KEYS[1] lock key, KEYS[2] fence counter, KEYS[3] waiter deadlines zset,
-- KEYS[4] queue list (same hash tag)
-- ARGV[1] owner token + attempt nonce, ARGV[2] lease in ms, ARGV[3] owner token,
-- ARGV[4] waiter timeout ms (0: a single attempt that does not register), ARGV[5] inbox ('' for none)
-- Returns {1, fence} when acquired, {0, holder's PTTL in ms} otherwise.
local lock, deadlines, owner, wait_ms = KEYS[1], KEYS[3], ARGV[3], tonumber(ARGV[4])
if redis.call('SET', lock, ARGV[1], 'NX', 'PX', ARGV[2]) then
  if wait_ms > 0 then
    leave(KEYS[4], deadlines, owner, ARGV[5])
  end
  return {1, next_fence(KEYS[2])}
end
if redis.call('GET', lock) == 'h:' .. owner then
  -- Handed over to this waiter: a new grant (a new, larger fence), not a nesting.
  redis.call('SET', lock, ARGV[1], 'PX', ARGV[2])
  leave(KEYS[4], deadlines, owner, ARGV[5])
  return {1, next_fence(KEYS[2])}
end
if wait_ms > 0 then
  register(KEYS[4], deadlines, owner, ARGV[5], now_ms(), wait_ms)
end
return {0, redis.call('PTTL', lock)}
