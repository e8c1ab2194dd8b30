-- Reentrant mode acquire (the hash layout is in hold.lua).
-- KEYS[1] lock hash, KEYS[2] fence counter (same hash tag)
-- ARGV[1] owner token, ARGV[2] lease in ms, ARGV[3] attempt nonce
-- Returns {1, fence} when acquired or nested, {0, holder's PTTL in ms} otherwise.
local lock, owner, lease = KEYS[1], ARGV[1], tonumber(ARGV[2])
local nested = nest(lock, owner, lease, ARGV[3])
if nested then
  return {1, nested}
end
if redis.call('EXISTS', lock) == 1 then
  return {0, redis.call('PTTL', lock)}
end
return {1, hold(lock, KEYS[2], owner, lease, ARGV[3])}
