-- Reentrant mode acquire (the hash layout is in hold.lua, the wait set in handoff.lua).
-- KEYS[1] lock hash, KEYS[2] fence counter, KEYS[3] waiter deadlines zset,
-- KEYS[4] queue list (same hash tag)
-- ARGV[1] owner token, ARGV[2] lease in ms, ARGV[3] attempt nonce,
-- ARGV[4] waiter timeout ms (0: a single attempt that does not register), ARGV[5] inbox ('' for none)
-- Returns {1, fence} when acquired or nested, {0, holder's PTTL in ms} otherwise.
local lock, deadlines, owner, lease, wait_ms = KEYS[1], KEYS[3], ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[4])
local nested = nest(lock, owner, lease, ARGV[3])
if nested then
  return {1, nested}
end
if redis.call('EXISTS', lock) == 1 then
  if redis.call('HGET', lock, 'h') ~= owner then
    if wait_ms > 0 then
      register(KEYS[4], deadlines, owner, ARGV[5], now_ms(), wait_ms)
    end
    return {0, redis.call('PTTL', lock)}
  end
  -- Handed over to this waiter: a new grant (a new, larger fence), not a nesting.
  redis.call('DEL', lock)
end
if wait_ms > 0 then
  leave(KEYS[4], deadlines, owner, ARGV[5])
end
return {1, hold(lock, KEYS[2], owner, lease, ARGV[3])}
