-- An operator's force-unlock (evict) in the interop modes (redis-py, python-redis-lock): deletes
-- the hold of the lock whose fence is ARGV[1] when it is one of ours (ours.lua; the counter's
-- value is its fence, inspect.lua, since nothing draws one while it is held) and wakes waiters
-- as release_plain.lua does: python-redis-lock's through its signal list, ours on the channel.
-- A hold of the other library's client has no fence, so no fence names it: it stays, as does
-- a hold of ours with another fence, so a copy of this request run later evicts nothing.
-- KEYS[1] lock key, KEYS[2] fence counter, KEYS[3] python-redis-lock signal list (optional)
-- ARGV[1] the fence of the hold to evict, ARGV[2] our release channel, ARGV[3] signal expiry ms
-- Returns 1 when evicted, 0 otherwise.
if redis.call('TYPE', KEYS[1])['ok'] ~= 'string' then
  return 0
end
local v = redis.call('GET', KEYS[1])
if not ours(v) or redis.call('GET', KEYS[2]) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
if KEYS[3] then
  redis.call('DEL', KEYS[3])
  redis.call('LPUSH', KEYS[3], 1)
  redis.call('PEXPIRE', KEYS[3], ARGV[3])
end
redis.call('PUBLISH', ARGV[2], '')
return 1
