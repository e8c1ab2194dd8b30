-- Shared prelude of the scripts that act for a holder without being the acquire, release or
-- renew (prepended by the crate, not loaded alone).

-- holds(lock, owner): whether owner holds lock, in any mode's layout: a string whose value
-- starts with the owner token (simple and interop modes: token, attempt nonce and maybe a note)
-- or a hash with the owner's hold count (reentrant and fair modes). A hold granted by a
-- hand-over (handoff.lua) is a hold of the waiter it names, taken or not.
local function holds(lock, owner)
  local t = redis.call('TYPE', lock)['ok']
  if t == 'string' then
    return string.sub(redis.call('GET', lock), 1, #owner) == owner
  elseif t == 'hash' then
    return redis.call('HEXISTS', lock, owner) == 1
  end
  return false
end
