-- Reentrant / fair mode cleanup, in two forms.
-- With a nonce: the undo of one acquisition attempt whose answer never came (the future was
-- dropped, the request failed). It undoes the hold only if this very attempt made it (its nonce
-- is the last one recorded), so an outer hold of the same owner survives, and a lock it freed
-- goes to the next waiter. It touches nothing else: the waiter's place and a hold handed to it
-- are its acquisition's to give up, which may still be going on. A copy of the attempt that
-- runs after it (sent on a connection since replaced, or resent) does nothing (handoff.lua).
-- Without a nonce: the end of a wait without a grant. Leaves the wait set; a lock handed over
-- to the leaver and neither taken nor claimed, a read let in for it and not claimed, or a free
-- lock with waiters in line, goes to the next waiter; readers that only a leaving writer kept
-- out wake. A hand-over this client took (ARGV[6]), or one to another client of the same
-- owner, is a hold like any other and stays.
-- Both are no-ops when run a second time.
-- KEYS[1] lock hash, KEYS[2] queue list, KEYS[3] waiter deadlines zset, KEYS[4] fence counter
-- ARGV[1] owner token, ARGV[2] attempt nonce ('' to leave), ARGV[3] release channel,
-- ARGV[4] claim window ms, ARGV[5] waiter tag (client id and inbox), ARGV[6] the fence of a
-- hand-over of this key this client took for this owner ('' for none)
local lock, queue, deadlines, owner = KEYS[1], KEYS[2], KEYS[3], ARGV[1]
local freed, readless = false, false
if ARGV[2] ~= '' then
  -- A copy of the attempt still on its way (an old connection, a resend) will find this.
  mark_cancelled(lock, ARGV[2])
  local nested = redis.call('DEL', nested_mark(lock, ARGV[2])) == 1
  local last = redis.call('HGET', lock, 'n') == ARGV[2]
  local first = redis.call('HGET', lock, 'h') == ARGV[2]
  -- A nesting this attempt made (its mark), or the first hold or claim ('h', and 'n' until
  -- another attempt of the owner nested on it: the acquisition's next attempt may, when this
  -- one's answer was lost).
  if (nested or last or first) and redis.call('HEXISTS', lock, owner) == 1 then
    if last then
      redis.call('HDEL', lock, 'n')
    end
    if first then
      redis.call('HDEL', lock, 'h')
    end
    if redis.call('HINCRBY', lock, owner, -1) <= 0 then
      redis.call('DEL', lock)
      freed = true
    end
  end
else
  readless = end_wait(lock, queue, deadlines, owner, ARGV[5], ARGV[3], tonumber(ARGV[4]), KEYS[4], ARGV[6])
  if redis.call('HEXISTS', lock, owner) == 1
    and handed_here(ARGV[5], redis.call('HGET', lock, 'n'), redis.call('HGET', lock, 'f'), ARGV[6]) then
    redis.call('DEL', lock)
    freed = true
  end
  -- A free lock with waiters in line: a hand-over let lapse, or a read phase going on (the
  -- lock does not exist while readers hold), where the next writer goes before the readers
  -- that came after it, as at the phase's end.
  local idle = not freed and redis.call('EXISTS', lock) == 0 and redis.call('EXISTS', queue) == 1
  readless = readless or (idle and readers_left(lock) ~= nil)
  freed = freed or readless or idle
end
if freed then
  -- The end of a read phase hands to a writer first; anything else lets waiting readers in.
  hand_over(lock, KEYS[4], queue, deadlines, ARGV[3], tonumber(ARGV[4]), true, not readless)
elseif ARGV[2] == '' then
  wake_readers(lock, deadlines, ARGV[3])
end
return 0
