-- Attach a note to the owner's current hold, replacing any earlier one. The note lives inside
-- the hold, so it goes wherever the hold goes (released, expired, handed over, replaced by the
-- next holder's value) and no reader can see it with a later hold:
-- - string layout (simple and interop modes): the value becomes owner token (32 hex digits) +
--   attempt nonce (32) + ':' + note, with the same expiry (KEEPTTL). Release and renew match
--   the owner prefix, as before; the other library in the interop modes only compares the
--   value with its own token, which never matches ours.
-- - hash layout (reentrant and fair modes): the field 'm' (owner tokens are 32 hex digits, so
--   they never collide with it).
-- KEYS[1] lock; ARGV[1] owner token, ARGV[2] note
-- Returns 1 when stored, 0 when the owner does not hold the lock (nothing stored).
local lock, owner = KEYS[1], ARGV[1]
if not holds(lock, owner) then
  return 0
end
if redis.call('TYPE', lock)['ok'] == 'hash' then
  redis.call('HSET', lock, 'm', ARGV[2])
else
  redis.call('SET', lock, string.sub(redis.call('GET', lock), 1, 64) .. ':' .. ARGV[2], 'KEEPTTL')
end
return 1
