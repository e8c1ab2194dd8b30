-- Interop mode compare-and-delete (redis-py, python-redis-lock), also the undo of an abandoned
-- attempt. Our value is the owner token followed by the attempt's nonce: a release names the
-- owner and matches that prefix, an undo names both and matches only its own grant. A value
-- the other library wrote (its own token) never starts with one of our owner tokens.
-- In python-redis-lock mode (KEYS[2] given) the release also does what that library's
-- UNLOCK_SCRIPT does, so its waiters, blocked in BLPOP on the signal list, wake at once:
-- DEL signal, LPUSH signal 1, PEXPIRE signal <signal_expire>.
-- KEYS[1] lock key, KEYS[2] python-redis-lock signal list (optional)
-- ARGV[1] owner token, or owner token and nonce; ARGV[2] our release channel;
-- ARGV[3] signal expiry in ms
-- Returns 1 when released, 0 when the value did not start with ARGV[1].
local v = redis.call('GET', KEYS[1])
if not v or string.sub(v, 1, #ARGV[1]) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
if KEYS[2] then
  redis.call('DEL', KEYS[2])
  redis.call('LPUSH', KEYS[2], 1)
  redis.call('PEXPIRE', KEYS[2], ARGV[3])
end
-- Our own waiters listen here; the other library's waiters never see it.
redis.call('PUBLISH', ARGV[2], '')
return 1
