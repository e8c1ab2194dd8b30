-- Reentrant / fair mode cleanup of an acquisition whose caller went away (the future was
-- dropped, the wait timed out, the reply was lost). Undoes the hold only if this very attempt
-- made it (its nonce is the last one recorded), so an outer hold of the same owner survives;
-- and leaves the fair queue.
-- KEYS[1] lock hash, KEYS[2] queue list, KEYS[3] waiter deadlines zset
-- ARGV[1] owner token, ARGV[2] attempt nonce, ARGV[3] release channel
local lock, owner = KEYS[1], ARGV[1]
if redis.call('HGET', lock, 'n') == ARGV[2] and redis.call('HEXISTS', lock, owner) == 1 then
  redis.call('HDEL', lock, 'n')
  if redis.call('HINCRBY', lock, owner, -1) <= 0 then
    redis.call('DEL', lock)
    redis.call('PUBLISH', ARGV[3], redis.call('LINDEX', KEYS[2], 0) or '')
  end
end
local head = redis.call('LINDEX', KEYS[2], 0)
if redis.call('ZREM', KEYS[3], owner) == 1 then
  redis.call('LREM', KEYS[2], 0, owner)
  if head == owner and redis.call('EXISTS', lock) == 0 then
    redis.call('PUBLISH', ARGV[3], redis.call('LINDEX', KEYS[2], 0) or '')
  end
end
return 0
