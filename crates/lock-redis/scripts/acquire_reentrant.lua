-- Reentrant mode acquire. The lock is a hash: owner token -> hold count, plus the fields
-- 'f' (fence of the outermost hold) and 'n' (nonce of the last acquisition, for the
-- cancellation cleanup). Owner tokens are 32 hex digits, so they never collide with 'f'/'n'.
-- KEYS[1] lock hash, KEYS[2] fence counter (same hash tag)
-- ARGV[1] owner token, ARGV[2] lease in ms, ARGV[3] attempt nonce
-- Returns {1, fence} when acquired or nested, {0, holder's PTTL in ms} otherwise.
local lock, owner, lease = KEYS[1], ARGV[1], tonumber(ARGV[2])
if redis.call('HEXISTS', lock, owner) == 1 then
  redis.call('HINCRBY', lock, owner, 1)
  redis.call('HSET', lock, 'n', ARGV[3])
  if redis.call('PTTL', lock) < lease then
    redis.call('PEXPIRE', lock, lease)
  end
  return {1, tonumber(redis.call('HGET', lock, 'f'))}
end
if redis.call('EXISTS', lock) == 1 then
  return {0, redis.call('PTTL', lock)}
end
local f = next_fence(KEYS[2])
redis.call('HSET', lock, owner, 1, 'f', fence_string(f), 'n', ARGV[3])
redis.call('PEXPIRE', lock, lease)
return {1, f}
