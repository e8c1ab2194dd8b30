-- A shared hold (the read side of a read-write lock; the layout is in handoff.lua): granted
-- unless the lock is held or an exclusive request waits (a live registered waiter).
-- KEYS[1] lock, KEYS[2] waiter deadlines zset (same hash tag)
-- ARGV[1] owner token, ARGV[2] lease ms, ARGV[3] how long (ms) a refused waiting reader marks
-- readers as waiting (0: a single attempt, no mark)
-- Returns {1, 0} when held (a shared hold draws no fence), {0, ms until worth retrying (-1:
-- unknown)} otherwise. A copy of this attempt (a resend) finds the owner's hold and only
-- extends it; after the owner's release (release_shared.lua) a late copy does nothing.
local lock, owner, lease = KEYS[1], ARGV[1], tonumber(ARGV[2])
if cancelled(lock, owner) then
  return {0, -1}
end
local s = lock .. ':s'
local now = now_ms()
local mine = tonumber(redis.call('HGET', s, owner))
if not (mine and mine > now) then
  local wait = nil
  if redis.call('EXISTS', lock) == 1 then
    wait = redis.call('PTTL', lock)
  elseif writer_waits(KEYS[2], now) then
    wait = -1
  end
  if wait then
    local mark = tonumber(ARGV[3])
    if mark > 0 then
      redis.call('SET', lock .. ':sw', 1, 'PX', mark)
    end
    return {0, wait}
  end
end
if not mine or mine < now + lease then
  redis.call('HSET', s, owner, now + lease)
end
if redis.call('PTTL', s) < lease then
  redis.call('PEXPIRE', s, lease)
end
return {1, 0}
