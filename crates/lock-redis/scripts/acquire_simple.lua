-- Simple mode acquire: SET NX PX plus the fencing counter, atomically.
-- KEYS[1] lock key, KEYS[2] fence counter (same hash tag)
-- ARGV[1] owner token, ARGV[2] lease in ms
-- Returns {1, fence} when acquired, {0, holder's PTTL in ms} otherwise.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {1, next_fence(KEYS[2])}
end
return {0, redis.call('PTTL', KEYS[1])}
