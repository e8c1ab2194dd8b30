-- Simple mode cleanup of an acquisition whose caller went away, and the leave of the wait set
-- (an acquisition that ended without a grant). Undoes the grant only if this very attempt made
-- it (the value is exactly owner token + nonce), so a later grant to the same owner survives;
-- an empty nonce never undoes a grant. Then leaves the wait set; a lock handed over to the
-- leaver and not claimed goes to the next waiter (handoff.lua).
-- KEYS[1] lock key, KEYS[2] waiter deadlines zset, KEYS[3] queue list, KEYS[4] fence counter
-- ARGV[1] owner token, ARGV[2] attempt nonce ('' to only leave), ARGV[3] release channel,
-- ARGV[4] claim window ms, ARGV[5] inbox
local lock, deadlines, owner = KEYS[1], KEYS[2], ARGV[1]
leave(KEYS[3], deadlines, owner, ARGV[5])
local v = redis.call('GET', lock)
if v and ((ARGV[2] ~= '' and v == owner .. ARGV[2]) or v == owner .. HANDED) then
  redis.call('DEL', lock)
  hand_over(lock, KEYS[4], KEYS[3], deadlines, ARGV[3], tonumber(ARGV[4]), false)
end
return 0
