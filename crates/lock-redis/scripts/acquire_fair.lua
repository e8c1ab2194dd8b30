-- Fair mode acquire: the reentrant hash (hold.lua) plus a FIFO of waiters (Redisson's fair
-- lock idea).
-- The queue is a list of owner tokens; a sorted set holds each waiter's liveness deadline
-- (server time, ms), pushed forward by every attempt of a live waiter. A waiter whose deadline
-- passed (it died, or stopped waiting without cleaning up) is dropped when it reaches the head,
-- so it blocks the queue for at most its timeout.
-- KEYS[1] lock hash, KEYS[2] fence counter, KEYS[3] queue list, KEYS[4] waiter deadlines zset
-- ARGV[1] owner token, ARGV[2] lease ms, ARGV[3] attempt nonce,
-- ARGV[4] waiter timeout ms (0: a single attempt that does not join the queue),
-- ARGV[5] release channel
-- Returns {1, fence} when acquired, {0, ms until worth retrying (-1: unknown)} otherwise.
local lock, queue, deadlines = KEYS[1], KEYS[3], KEYS[4]
local owner, lease, wait_ms = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[4])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local purged = false
while true do
  local head = redis.call('LINDEX', queue, 0)
  if not head then break end
  local d = redis.call('ZSCORE', deadlines, head)
  if d and tonumber(d) > now then break end
  redis.call('LPOP', queue)
  redis.call('ZREM', deadlines, head)
  purged = true
end

local nested = nest(lock, owner, lease, ARGV[3])
if nested then
  return {1, nested}
end

local head = redis.call('LINDEX', queue, 0)
local free = redis.call('EXISTS', lock) == 0
if free and (not head or head == owner) then
  if head then
    redis.call('LPOP', queue)
    redis.call('ZREM', deadlines, owner)
  end
  return {1, hold(lock, KEYS[2], owner, lease, ARGV[3])}
end
if free and purged then
  -- The head changed while the lock is free: let the new head go now.
  redis.call('PUBLISH', ARGV[5], head)
end

if wait_ms > 0 then
  if not redis.call('ZSCORE', deadlines, owner) then
    redis.call('RPUSH', queue, owner)
    if not head then head = owner end
  end
  redis.call('ZADD', deadlines, now + wait_ms, owner)
  -- The queue outlives its last live waiter only briefly.
  local keep = wait_ms * 2
  for _, k in ipairs({queue, deadlines}) do
    if redis.call('PTTL', k) < keep then
      redis.call('PEXPIRE', k, keep)
    end
  end
end

if not free then
  return {0, redis.call('PTTL', lock)}
end
-- Free, but promised to the head: it takes the lock within a round trip and then holds it for
-- about a lease (the asker's is the best guess), so look again after that, not at the head's
-- deadline: a head that crashes while holding sends no release.
local d = head and redis.call('ZSCORE', deadlines, head)
if d then
  return {0, math.max(1, math.min(lease, tonumber(d) - now))}
end
return {0, -1}
