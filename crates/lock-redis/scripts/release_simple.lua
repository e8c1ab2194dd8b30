-- Simple mode compare-and-delete. The value is the owner token (32 hex digits) followed by the
-- attempt's nonce: a release names the owner and matches the prefix, the cleanup of one
-- attempt names owner and nonce and matches only the grant that attempt made. A freed lock is
-- handed over to one registered waiter (handoff.lua).
-- KEYS[1] lock key, KEYS[2] waiter deadlines zset, KEYS[3] queue list, KEYS[4] fence counter
-- ARGV[1] owner token, or owner token and nonce; ARGV[2] release channel; ARGV[3] claim window ms;
-- ARGV[4] this release's nonce: a copy of a release that already freed the lock (resent by a
-- driver) finds it in the lock's release mark (handoff.lua) and answers freed again
-- Returns {2, hand-over payload ('' for nobody)} when released, {0, ''} when the owner did not
-- hold the key.
if released_by(KEYS[1], ARGV[4]) then
  return {2, ''}
end
local v = redis.call('GET', KEYS[1])
if v and string.sub(v, 1, #ARGV[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  mark_released(KEYS[1], ARGV[1], ARGV[4])
  return {2, hand_over(KEYS[1], KEYS[4], KEYS[3], KEYS[2], ARGV[2], tonumber(ARGV[3]), false, true)}
end
return {0, ''}
