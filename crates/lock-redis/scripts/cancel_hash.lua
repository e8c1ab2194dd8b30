-- Reentrant / fair mode cleanup of an acquisition whose caller went away (the future was
-- dropped, the reply was lost), and the fair queue's leave (an acquisition that ended without
-- a grant). Undoes the hold only if this very attempt made it (its nonce is the last one
-- recorded), so an outer hold of the same owner survives; an empty nonce never undoes a hold.
-- Then leaves the fair queue, telling the next waiter when the leaver was the head of the
-- queue of a free lock.
-- KEYS[1] lock hash, KEYS[2] queue list, KEYS[3] waiter deadlines zset
-- ARGV[1] owner token, ARGV[2] attempt nonce ('' to only leave the queue), ARGV[3] release channel
local lock, owner = KEYS[1], ARGV[1]
if ARGV[2] ~= '' and redis.call('HGET', lock, 'n') == ARGV[2] and redis.call('HEXISTS', lock, owner) == 1 then
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
