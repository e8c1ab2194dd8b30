-- Fair mode acquire: the reentrant hash (hold.lua) plus a FIFO of waiters (Redisson's fair
-- lock idea) and the direct hand-over of handoff.lua.
-- The queue is a list of owner tokens; the sorted set holds each waiter's liveness deadline
-- (server time, ms), pushed forward by every attempt of a live waiter. A release hands the lock
-- to the first live waiter (taking it out of the queue), whose next attempt claims it; a waiter
-- whose deadline passed (it died, or stopped waiting without cleaning up) is dropped when it
-- reaches the head, so it blocks the queue for at most its timeout.
-- KEYS[1] lock hash, KEYS[2] fence counter, KEYS[3] queue list, KEYS[4] waiter deadlines zset
-- ARGV[1] owner token, ARGV[2] lease ms, ARGV[3] attempt nonce,
-- ARGV[4] waiter timeout ms (0: a single attempt that does not join the queue),
-- ARGV[5] release channel, ARGV[6] claim window ms, ARGV[7] inbox ('' for none)
-- Returns {1, fence} when acquired, {0, ms until worth retrying (-1: unknown)} otherwise.
local lock, queue, deadlines = KEYS[1], KEYS[3], KEYS[4]
local owner, lease, wait_ms = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[4])

local nested = nest(lock, owner, lease, ARGV[3])
if nested then
  return {1, nested}
end

local now = now_ms()
if redis.call('EXISTS', lock) == 1 then
  if redis.call('HGET', lock, 'h') == owner then
    -- Handed over to this waiter: a new grant (a new, larger fence), not a nesting.
    redis.call('DEL', lock)
    redis.call('ZREM', deadlines, owner)
    return {1, hold(lock, KEYS[2], owner, lease, ARGV[3])}
  end
else
  -- Free: the first live waiter in line, if any, goes first.
  while true do
    local head = redis.call('LINDEX', queue, 0)
    if not head then break end
    head = string.sub(head, 1, 32)
    local d = redis.call('ZSCORE', deadlines, head)
    if d and tonumber(d) > now then break end
    redis.call('LPOP', queue)
    redis.call('ZREM', deadlines, head)
  end
  local head = redis.call('LINDEX', queue, 0)
  head = head and string.sub(head, 1, 32)
  if not head or head == owner then
    if head then
      redis.call('LPOP', queue)
      redis.call('ZREM', deadlines, owner)
    end
    return {1, hold(lock, KEYS[2], owner, lease, ARGV[3])}
  end
  -- Free, but another waiter is first (the last one named never claimed it): hand it over.
  hand_over(lock, queue, deadlines, ARGV[5], tonumber(ARGV[6]), true)
end

if wait_ms > 0 then
  register(queue, deadlines, owner, ARGV[7], now, wait_ms)
end
return {0, redis.call('PTTL', lock)}
