-- Release of a shared hold (handoff.lua): the last reader to leave hands the lock to the
-- first registered waiter (an exclusive request), or lets the waiting readers in, or publishes
-- '' for anyone; a released
-- permit goes to one registered permit waiter instead (hand_permit).
-- KEYS[1] lock, KEYS[2] queue list, KEYS[3] waiter deadlines zset, KEYS[4] fence counter
-- ARGV[1] owner token, ARGV[2] release channel, ARGV[3] claim window ms, ARGV[4] '1' when the
-- lock is a hash (reentrant and fair modes)
-- Returns {0, ''} when the owner held nothing, {1, payload} when other readers remain or the
-- permit was handed to a waiter (the hand-over's payload, '' for none), {2, payload} when the
-- last reader left (the hand-over's payload, '' for nobody). The owner is marked done
-- (mark_done in handoff.lua, which acquire_shared.lua reads): a copy of this release (a
-- resend) answers what the first did, and a late copy of the owner's acquisition grants
-- nothing. For RELEASED_MS, not CANCELLED_MS: every read writes one such mark, and a lock's
-- marks share MARKS_CAP places, which a stream of readers must not take from the
-- cancellations for minutes; a copy of the acquisition later than that (a server paused
-- longer, then running a copy from a connection the client had given up) makes a reader
-- nobody holds, which keeps writers out until its lease ends: a delay, never two holders.
local lock, owner = KEYS[1], ARGV[1]
local before = done(lock, owner)
if before then
  return {before, ''}
end
-- A permit waiter whose attempt's answer never came, undone here, waits no more.
unregister_permit_waiter(lock, owner)
local s = lock .. ':s'
local mine = tonumber(redis.call('HGET', s, owner))
local permit = redis.call('HGET', s .. 'n', owner)
local slot = permit and string.match(permit, '^(%d+):')
drop_shared(s, owner)
local held = mine and mine > now_ms()
if not held then
  mark_done(lock, owner, 0)
  return {0, ''}
end
if readers_left(lock) then
  mark_done(lock, owner, 1)
  wake_upgrader(lock, ARGV[2])
  if slot then
    return {1, hand_permit(lock, slot, ARGV[2], tonumber(ARGV[3]), KEYS[4])}
  end
  return {1, ''}
end
redis.call('DEL', s, s .. 'n', s .. 'h', s .. 'm', s .. 'r')
if redis.call('EXISTS', lock) == 1 then
  -- The read of an upgraded reader, whose write still holds the lock: that write's release
  -- hands it over.
  mark_done(lock, owner, 1)
  return {1, ''}
end
if slot and redis.call('EXISTS', lock .. ':pq') == 1 then
  -- The last permit: one freed permit all the same, for one waiter (a semaphore's key has no
  -- exclusive waiters).
  mark_done(lock, owner, 1)
  return {1, hand_permit(lock, slot, ARGV[2], tonumber(ARGV[3]), KEYS[4])}
end
mark_done(lock, owner, 2)
-- A read phase ended: the next writer goes before the readers that registered during it.
return {2, hand_over(lock, KEYS[4], KEYS[2], KEYS[3], ARGV[2], tonumber(ARGV[3]), ARGV[4] == '1', false)}
