-- Reentrant / fair mode release: decrement the owner's hold count, delete the lock at zero.
-- KEYS[1] lock hash, KEYS[2] fair queue (absent in reentrant mode)
-- ARGV[1] owner token, ARGV[2] release channel
-- Returns {0, ''} when the owner did not hold the key, {1, ''} when a nested hold remains,
-- {2, next} when freed: it PUBLISHes the release with the next waiter in line as payload
-- ('' without a queue) and returns that waiter too, so the releasing client wakes only it.
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
  return {0, ''}
end
if redis.call('HINCRBY', KEYS[1], ARGV[1], -1) > 0 then
  return {1, ''}
end
redis.call('DEL', KEYS[1])
local head = redis.call('LINDEX', KEYS[2], 0) or ''
redis.call('PUBLISH', ARGV[2], head)
return {2, head}
