-- Attach a note to the owner's current hold, replacing any earlier one. The note lives inside
-- the hold, so it goes wherever the hold goes (released, expired, handed over, replaced by the
-- next holder's value) and no reader can see it with a later hold:
-- - string layout (simple and interop modes): the value becomes owner token (32 hex digits) +
--   attempt nonce (32) + ':' + note, with the same expiry (KEEPTTL). Release and renew match
--   the owner prefix, as before; the other library in the interop modes only compares the
--   value with its own token, which never matches ours.
-- - hash layout (reentrant and fair modes): the field 'm' (owner tokens are 32 hex digits, so
--   they never collide with it).
-- - a semaphore's permit (a shared hold of the pool key with its slot in '<lock>:sn',
--   handoff.lua): '<lock>:sm', owner token -> note, which lives at least as long as the
--   permit; the permit's release or expiry drops its entry (drop_shared), and owner tokens
--   are never reused, so a later permit never shows this note.
-- KEYS[1] lock; ARGV[1] owner token, ARGV[2] note
-- Returns 1 when stored, 0 when the owner does not hold the lock (nothing stored).
local lock, owner = KEYS[1], ARGV[1]
if not holds(lock, owner) then
  local s = lock .. ':s'
  local left = (tonumber(redis.call('HGET', s, owner)) or 0) - now_ms()
  if left <= 0 or redis.call('HEXISTS', s .. 'n', owner) == 0 then
    return 0
  end
  local sm = s .. 'm'
  redis.call('HSET', sm, owner, ARGV[2])
  if redis.call('PTTL', sm) < left then
    redis.call('PEXPIRE', sm, left)
  end
  return 1
end
if redis.call('TYPE', lock)['ok'] == 'hash' then
  redis.call('HSET', lock, 'm', ARGV[2])
else
  redis.call('SET', lock, string.sub(redis.call('GET', lock), 1, 64) .. ':' .. ARGV[2], 'KEEPTTL')
end
return 1
