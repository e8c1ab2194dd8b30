-- Interop mode acquire (redis-py, python-redis-lock): the other library's own SET NX on the
-- same plain key, plus our fencing counter, atomically. No wait set and no hand-over: the other
-- side's clients would ignore a marker naming our waiter, so a freed lock goes to whoever asks
-- first, whichever library it uses.
-- KEYS[1] lock key, KEYS[2] fence counter
-- ARGV[1] owner token + attempt nonce, ARGV[2] lease in ms
-- Returns {1, fence} when acquired, {0, holder's PTTL in ms (-1: no expiry)} otherwise.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {1, next_fence(KEYS[2])}
end
return {0, redis.call('PTTL', KEYS[1])}
