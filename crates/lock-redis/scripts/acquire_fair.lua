-- Fair mode acquire: the reentrant hash (hold.lua) plus a FIFO of waiters (Redisson's fair
-- lock idea) and the direct hand-over of handoff.lua.
-- The queue is a list of owner tokens; the sorted set holds each waiter's liveness deadline
-- (server time, ms), pushed forward by every attempt of a live waiter. A release hands the lock
-- to the first live waiter (taking it out of the queue), who holds it at once or claims it; a waiter
-- whose deadline passed (it stopped waiting without cleaning up), or whose client no longer
-- listens on its inbox (it died), is dropped when it reaches the head.
-- KEYS[1] lock hash, KEYS[2] fence counter, KEYS[3] queue list, KEYS[4] waiter deadlines zset
-- ARGV[1] owner token, ARGV[2] lease ms, ARGV[3] attempt nonce,
-- ARGV[4] waiter timeout ms (0: a single attempt that does not join the queue),
-- ARGV[5] release channel, ARGV[6] claim window ms, ARGV[7] waiter tag (client id and inbox),
-- ARGV[8] the fence of a hand-over of this key this client took for this owner without a round
-- trip ('' for none): such a hold is nested, not claimed, ARGV[9] the read being upgraded: its
-- owner token ('' for none; handoff.lua), which goes before the queue (its writers wait for it)
-- Returns {1, fence, 0} when acquired, {0, ms until worth retrying (-1: unknown), the waiter
-- deadline it set or 0} otherwise. Running it twice with the same arguments does what running
-- it once did; after the attempt's cleanup (cancel_hash.lua) it does nothing.
local lock, queue, deadlines = KEYS[1], KEYS[3], KEYS[4]
local owner, lease, wait_ms = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[4])
if cancelled(lock, ARGV[3]) then
  return {0, -1, 0}
end

local held = redis.call('HEXISTS', lock, owner) == 1
if held and handed_here(ARGV[7], redis.call('HGET', lock, 'n'), redis.call('HGET', lock, 'f'), ARGV[8]) then
  -- Handed over to this waiter (handoff.lua) and not taken: claimed with this attempt's nonce
  -- and at least its lease; the hand-over drew the fence.
  redis.call('HSET', lock, 'n', ARGV[3], 'h', ARGV[3])
  if redis.call('PTTL', lock) < lease then
    redis.call('PEXPIRE', lock, lease)
  end
  redis.call('ZREM', deadlines, owner)
  return {1, tonumber(redis.call('HGET', lock, 'f')), 0}
end
local nested = held and nest(lock, owner, lease, ARGV[3])
if nested then
  return {1, nested, 0}
end

local now = now_ms()
local refused = redis.call('EXISTS', lock) == 0 and readers_refusal(lock, queue, deadlines, owner, ARGV[7], wait_ms, ARGV[9])
if refused then
  return refused
end
if redis.call('EXISTS', lock) == 0 then
  -- Free: the first live waiter in line, if any, goes first.
  while true do
    local entry = redis.call('LINDEX', queue, 0)
    if not entry or live_deadline(entry, deadlines, now, owner) then break end
    redis.call('LPOP', queue)
    redis.call('ZREM', deadlines, string.sub(entry, 1, 32))
  end
  local head = redis.call('LINDEX', queue, 0)
  head = head and string.sub(head, 1, 32)
  if not head or head == owner or ARGV[9] ~= '' then
    if head == owner then
      redis.call('LPOP', queue)
      redis.call('ZREM', deadlines, owner)
    elseif head then
      leave(queue, deadlines, owner, ARGV[7])
    end
    return {1, hold(lock, KEYS[2], owner, lease, ARGV[3]), 0}
  end
  -- Free, but another waiter is first (the last one handed a hold let it lapse): hand it over.
  hand_over(lock, KEYS[2], queue, deadlines, ARGV[5], tonumber(ARGV[6]), true, true)
end

local d = 0
if wait_ms > 0 then
  d = register(lock, queue, deadlines, owner, ARGV[7], now, wait_ms)
end
return {0, redis.call('PTTL', lock), d}
