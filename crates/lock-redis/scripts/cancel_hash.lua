-- Reentrant / fair mode cleanup of an acquisition whose caller went away (the future was
-- dropped, the reply was lost), and the leave of the wait set (an acquisition that ended
-- without a grant). Undoes the hold only if this very attempt made it (its nonce is the last
-- one recorded), so an outer hold of the same owner survives; an empty nonce never undoes a
-- hold. Then leaves the wait set; a lock handed over to the leaver and not claimed, or a free
-- lock with waiters in line, goes to the next waiter.
-- KEYS[1] lock hash, KEYS[2] queue list, KEYS[3] waiter deadlines zset, KEYS[4] fence counter
-- ARGV[1] owner token, ARGV[2] attempt nonce ('' to only leave), ARGV[3] release channel,
-- ARGV[4] claim window ms, ARGV[5] inbox
local lock, queue, deadlines, owner = KEYS[1], KEYS[2], KEYS[3], ARGV[1]
leave(queue, deadlines, owner, ARGV[5])
local freed = false
if ARGV[2] ~= '' and redis.call('HGET', lock, 'n') == ARGV[2] and redis.call('HEXISTS', lock, owner) == 1 then
  redis.call('HDEL', lock, 'n')
  if redis.call('HINCRBY', lock, owner, -1) <= 0 then
    redis.call('DEL', lock)
    freed = true
  end
elseif redis.call('HGET', lock, 'n') == HANDED and redis.call('HEXISTS', lock, owner) == 1 then
  -- Handed over to the leaver and neither taken nor claimed.
  redis.call('DEL', lock)
  freed = true
end
if freed or (redis.call('EXISTS', lock) == 0 and redis.call('EXISTS', queue) == 1) then
  hand_over(lock, KEYS[4], queue, deadlines, ARGV[3], tonumber(ARGV[4]), true)
end
return 0
