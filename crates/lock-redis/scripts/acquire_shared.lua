-- A shared hold (the read side of a read-write lock, or one of a semaphore's permits; the
-- layout is in handoff.lua): granted unless the lock is held, an exclusive request waits (a
-- live registered waiter), or every permit is held.
-- KEYS[1] lock, KEYS[2] waiter deadlines zset, KEYS[3] fence counter (same hash tag)
-- ARGV[1] owner token, ARGV[2] lease ms, ARGV[3] how long (ms) a refused waiting request stays
-- registered (0: a single attempt, which does not register), ARGV[4] the
-- number of permits (0: a read), ARGV[5] the waiter's tag (client id and inbox, handoff.lua)
-- Returns {1, 0} when a read is held (a read draws no fence), {1, fence, slot} when a permit
-- is, {0, ms until worth retrying (-1: unknown), the registered permit waiter's deadline in
-- server ms (0: none)} otherwise; a permit handed to this owner (hand_permit), or a read let in
-- for it (let_readers_in), is claimed. A refused waiting read registers as a waiting reader. A
-- copy of this attempt (a resend) finds the owner's hold and only extends it, or registers
-- again; after the owner's release (release_shared.lua) a late copy does nothing.
local lock, owner, lease, permits = KEYS[1], ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[4])
if done(lock, owner) then
  return {0, -1}
end
local s = lock .. ':s'
local now = now_ms()
local mine = tonumber(redis.call('HGET', s, owner))
local live = mine and mine > now and (permits == 0 or redis.call('HEXISTS', s .. 'n', owner) == 1)
local granted = nil
if not live then
  local wait = nil
  if redis.call('EXISTS', lock) == 1 then
    wait = redis.call('PTTL', lock)
  elseif writer_waits(KEYS[2], now) then
    wait = -1
  elseif permits > 0 then
    wait, granted = free_permit(lock, permits, now, KEYS[3])
  end
  if wait then
    local mark = tonumber(ARGV[3])
    if mark > 0 and permits > 0 then
      register_permit_waiter(lock, owner, ARGV[5], now + mark, mark)
      return {0, wait, now + mark}
    elseif mark > 0 then
      -- The next freed write lets it in (let_readers_in in handoff.lua), before later writers.
      register_reader(lock, owner, now + mark, mark)
    end
    return {0, wait}
  end
end
if permits == 0 then
  claim_read(lock, owner)
end
if not live or mine < now + lease then
  redis.call('HSET', s, owner, now + lease)
end
if redis.call('PTTL', s) < lease then
  redis.call('PEXPIRE', s, lease)
end
if permits == 0 then
  return {1, 0}
end
local sn = s .. 'n'
if granted then
  redis.call('HSET', sn, owner, granted)
  unregister_permit_waiter(lock, owner)
else
  granted = redis.call('HGET', sn, owner)
  redis.call('HDEL', s .. 'h', owner)
end
if redis.call('PTTL', sn) < lease then
  redis.call('PEXPIRE', sn, lease)
end
local slot, fence = string.match(granted, '^(%d+):(%d+)$')
return {1, tonumber(fence), tonumber(slot)}
