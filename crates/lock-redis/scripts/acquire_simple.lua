-- Simple mode acquire: SET NX PX plus the fencing counter, atomically; a hold handed over to
-- this waiter (handoff.lua) and not taken is claimed; a waiting attempt that finds the key held
-- registers.
-- KEYS[1] lock key, KEYS[2] fence counter, KEYS[3] waiter deadlines zset,
-- KEYS[4] queue list (same hash tag)
-- ARGV[1] owner token + attempt nonce, ARGV[2] lease in ms, ARGV[3] owner token,
-- ARGV[4] waiter timeout ms (0: a single attempt that does not register), ARGV[5] waiter tag
-- (client id and inbox), ARGV[6] the fence of a hand-over of this key this client took for this
-- owner without a round trip ('' for none): that hold is not claimed a second time,
-- ARGV[7] the read being upgraded: its owner token ('' for none; handoff.lua)
-- Returns {1, fence, 0} when acquired, {0, holder's PTTL in ms, the waiter deadline it set or 0}
-- otherwise. Running it twice with the same arguments does what running it once did; after the
-- attempt's cleanup (cancel_simple.lua) it does nothing.
local lock, deadlines, owner, wait_ms = KEYS[1], KEYS[3], ARGV[3], tonumber(ARGV[4])
if cancelled(lock, string.sub(ARGV[1], #owner + 1)) then
  return {0, -1, 0}
end
local refused = readers_refusal(lock, KEYS[4], deadlines, owner, ARGV[5], wait_ms, ARGV[7])
if refused then
  return refused
end
if redis.call('SET', lock, ARGV[1], 'NX', 'PX', ARGV[2]) then
  if wait_ms > 0 then
    leave(KEYS[4], deadlines, owner, ARGV[5])
  end
  return {1, next_fence(KEYS[2]), 0}
end
local v = redis.call('GET', lock)
if v == ARGV[1] then
  -- This very attempt ran already (a resent request): the same grant, whose fence is the
  -- counter's (nothing else draws one while the lock is held).
  return {1, tonumber(redis.call('GET', KEYS[2])), 0}
end
if v == owner .. client_of(ARGV[5]) and redis.call('GET', KEYS[2]) ~= ARGV[6] then
  -- Handed over to this waiter: claimed with this attempt's nonce and lease, and a new fence.
  redis.call('SET', lock, ARGV[1], 'PX', ARGV[2])
  leave(KEYS[4], deadlines, owner, ARGV[5])
  return {1, next_fence(KEYS[2]), 0}
end
local d = 0
-- An owner holding the lock through another attempt (one whose answer was lost, or the late
-- copy of an earlier attempt running after a later one was granted) does not wait behind
-- itself: registered, it would be handed its own lock after its release.
if wait_ms > 0 and string.sub(v or '', 1, #owner) ~= owner then
  d = register(lock, KEYS[4], deadlines, owner, ARGV[5], now_ms(), wait_ms)
end
return {0, redis.call('PTTL', lock), d}
