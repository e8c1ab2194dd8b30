-- Reentrant / fair mode release: decrement the owner's hold count, delete the lock at zero and
-- hand it over to one waiter (handoff.lua).
-- KEYS[1] lock hash, KEYS[2] queue list, KEYS[3] waiter deadlines zset, KEYS[4] fence counter
-- ARGV[1] owner token, ARGV[2] release channel, ARGV[3] claim window ms, ARGV[4] this release's
-- nonce: a release that already ran (a driver resends a request whose answer it did not get)
-- finds it in the field 'r' and counts nothing more, or, when it freed the lock, in the
-- lock's release mark (handoff.lua) and answers freed again
-- Returns {0, ''} when the owner did not hold the key, {1, ''} when a nested hold remains,
-- {2, payload} when freed: the hand-over's payload ('' for nobody), so the releasing client
-- wakes only that waiter, and hands it the hold if it is its own.
if released_by(KEYS[1], ARGV[4]) then
  return {2, ''}
end
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
  return {0, ''}
end
if redis.call('HGET', KEYS[1], 'r') == ARGV[4] then
  return {1, ''}
end
if redis.call('HINCRBY', KEYS[1], ARGV[1], -1) > 0 then
  redis.call('HSET', KEYS[1], 'r', ARGV[4])
  return {1, ''}
end
redis.call('DEL', KEYS[1])
mark_released(KEYS[1], ARGV[1], ARGV[4])
return {2, hand_over(KEYS[1], KEYS[4], KEYS[2], KEYS[3], ARGV[2], tonumber(ARGV[3]), true, true)}
