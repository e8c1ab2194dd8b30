-- Raise a lock's fence counter to at least a floor, for its holder only: a Redlock quorum
-- writes the token it hands out back to the masters it locked, so that the next majority,
-- which shares a master with this one, draws a larger token (lock_core::QuorumBackend).
-- KEYS[1] lock (any mode's layout), KEYS[2] fence counter
-- ARGV[1] owner token, ARGV[2] floor (decimal digits without leading zeros, at most 2^63 - 1)
-- Returns 1 when the owner holds the lock (the counter is now at least the floor), 0 when it
-- does not (nothing changed).
local lock, counter, owner, floor = KEYS[1], KEYS[2], ARGV[1], ARGV[2]
if not holds(lock, owner) then
  return 0
end
-- Decimal strings without leading zeros compare by length, then digit by digit: exact for every
-- 64-bit token, where Lua numbers stop at 2^53.
local function below(a, b)
  return #a < #b or (#a == #b and a < b)
end
local current = redis.call('GET', counter)
if not current then
  -- A missing counter restarts from the server clock (fence.lua): start it at the larger of the
  -- clock and the floor, with a counter's usual lifetime.
  local t = redis.call('TIME')
  local start = fence_string(tonumber(t[1]) * 1000000 + tonumber(t[2]))
  if below(start, floor) then
    start = floor
  end
  redis.call('SET', counter, start, 'PX', 86400000)
elseif below(current, floor) then
  -- KEEPTTL: the counter still expires a day after its creation (fence.lua).
  redis.call('SET', counter, floor, 'KEEPTTL')
end
return 1
