-- Reentrant mode acquire (the hash layout is in hold.lua, the wait set in handoff.lua).
-- KEYS[1] lock hash, KEYS[2] fence counter, KEYS[3] waiter deadlines zset,
-- KEYS[4] queue list (same hash tag)
-- ARGV[1] owner token, ARGV[2] lease in ms, ARGV[3] attempt nonce,
-- ARGV[4] waiter timeout ms (0: a single attempt that does not register), ARGV[5] waiter tag
-- (client id and inbox), ARGV[6] the fence of a hand-over of this key this client took for
-- this owner without a round trip ('' for none): such a hold is nested, not claimed,
-- ARGV[7] the read being upgraded: its owner token ('' for none; handoff.lua)
-- Returns {1, fence, 0} when acquired or nested, {0, holder's PTTL in ms, the waiter deadline it
-- set or 0} otherwise. Running it twice with the same arguments does what running it once did;
-- after the attempt's cleanup (cancel_hash.lua) it does nothing.
local lock, deadlines, owner, lease, wait_ms = KEYS[1], KEYS[3], ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[4])
if cancelled(lock, ARGV[3]) then
  return {0, -1, 0}
end
local held = redis.call('HEXISTS', lock, owner) == 1
if held and handed_here(ARGV[5], redis.call('HGET', lock, 'n'), redis.call('HGET', lock, 'f'), ARGV[6]) then
  -- Handed over to this waiter (handoff.lua) and not taken: claimed with this attempt's nonce
  -- and at least its lease; the hand-over drew the fence.
  redis.call('HSET', lock, 'n', ARGV[3], 'h', ARGV[3])
  if redis.call('PTTL', lock) < lease then
    redis.call('PEXPIRE', lock, lease)
  end
  leave(KEYS[4], deadlines, owner, ARGV[5])
  return {1, tonumber(redis.call('HGET', lock, 'f')), 0}
end
local nested = held and nest(lock, owner, lease, ARGV[3])
if nested then
  return {1, nested, 0}
end
if redis.call('EXISTS', lock) == 1 then
  local d = 0
  if wait_ms > 0 then
    d = register(lock, KEYS[4], deadlines, owner, ARGV[5], now_ms(), wait_ms)
  end
  return {0, redis.call('PTTL', lock), d}
end
local refused = readers_refusal(lock, KEYS[4], deadlines, owner, ARGV[5], wait_ms, ARGV[7])
if refused then
  return refused
end
if wait_ms > 0 then
  leave(KEYS[4], deadlines, owner, ARGV[5])
end
return {1, hold(lock, KEYS[2], owner, lease, ARGV[3]), 0}
