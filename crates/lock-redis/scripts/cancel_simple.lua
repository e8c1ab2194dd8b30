-- Simple mode cleanup, in two forms (as cancel_hash.lua).
-- With a nonce: the undo of one acquisition attempt whose answer never came. Undoes the grant
-- only if this very attempt made it (the value is exactly owner token + nonce), so a later
-- grant to the same owner survives, and hands the lock to the next waiter. Nothing else.
-- Without a nonce: the end of a wait without a grant. Leaves the wait set; a lock handed over
-- to the leaver and not claimed, nor taken by this client (ARGV[6]), or a read let in for it
-- and not claimed, goes to the next waiter; readers that only a leaving writer kept out wake.
-- Both are no-ops when run a second time.
-- KEYS[1] lock key, KEYS[2] waiter deadlines zset, KEYS[3] queue list, KEYS[4] fence counter
-- ARGV[1] owner token, ARGV[2] attempt nonce ('' to leave), ARGV[3] release channel,
-- ARGV[4] claim window ms, ARGV[5] waiter tag (client id and inbox), ARGV[6] the fence of a
-- hand-over of this key this client took for this owner ('' for none)
local lock, deadlines, owner = KEYS[1], KEYS[2], ARGV[1]
local v = redis.call('GET', lock)
local undo, readless = false, false
if ARGV[2] ~= '' then
  -- A copy of the attempt still on its way (an old connection, a resend) will find this.
  mark_cancelled(lock, ARGV[2])
  undo = v == owner .. ARGV[2]
else
  readless = end_wait(lock, KEYS[3], deadlines, owner, ARGV[5], ARGV[3], tonumber(ARGV[4]), KEYS[4], ARGV[6])
  undo = v == owner .. client_of(ARGV[5]) and redis.call('GET', KEYS[4]) ~= ARGV[6]
end
if undo then
  redis.call('DEL', lock)
  hand_over(lock, KEYS[4], KEYS[3], deadlines, ARGV[3], tonumber(ARGV[4]), false, true)
elseif readless then
  hand_over(lock, KEYS[4], KEYS[3], deadlines, ARGV[3], tonumber(ARGV[4]), false, false)
elseif ARGV[2] == '' then
  wake_readers(lock, deadlines, ARGV[3])
end
return 0
