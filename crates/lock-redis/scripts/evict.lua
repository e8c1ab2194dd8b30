-- An operator's force-unlock (evict): deletes the exclusive hold of the lock whose fence is
-- ARGV[1], whatever its owner, and hands the lock to the next registered waiter as a release
-- does (handoff.lua). A hold with another fence (released or handed on since the operator
-- looked) stays, so a copy of this request run later (a resend) evicts nothing.
-- KEYS[1] lock, KEYS[2] waiter deadlines zset, KEYS[3] queue list, KEYS[4] fence counter
-- ARGV[1] the fence of the hold to evict, ARGV[2] release channel, ARGV[3] claim window ms
-- Returns {1, hand-over payload ('' for nobody)} when evicted, {0, ''} otherwise.
local lock = KEYS[1]
local t = redis.call('TYPE', lock)['ok']
local fence
if t == 'string' then
  -- Simple mode: the counter's last value is the holder's fence (inspect.lua).
  fence = redis.call('GET', KEYS[4])
elseif t == 'hash' then
  fence = redis.call('HGET', lock, 'f')
end
if not fence or fence ~= ARGV[1] then
  return {0, ''}
end
redis.call('DEL', lock)
return {1, hand_over(lock, KEYS[4], KEYS[3], KEYS[2], ARGV[2], tonumber(ARGV[3]), t == 'hash', true)}
