-- Batched extension of shared holds (handoff.lua), as renew_simple.lua: the expiry only ever
-- moves later.
-- KEYS[i] lock; ARGV[2i-1] owner token, ARGV[2i] new lease in ms
-- Returns one flag per key: 1 held by that owner (lease now at least the new one), 0 not held.
local now = now_ms()
local out = {}
for i, lock in ipairs(KEYS) do
  local owner, lease = ARGV[2 * i - 1], tonumber(ARGV[2 * i])
  local s = lock .. ':s'
  local mine = tonumber(redis.call('HGET', s, owner))
  if mine and mine > now then
    if mine < now + lease then
      redis.call('HSET', s, owner, now + lease)
    end
    if redis.call('PTTL', s) < lease then
      redis.call('PEXPIRE', s, lease)
      -- A semaphore's slots (handoff.lua) live as long; no key, no effect.
      redis.call('PEXPIRE', s .. 'n', lease)
      redis.call('PEXPIRE', s .. 'h', lease)
    end
    -- A permit's holder note (set_note.lua) lives at least as long as the permit, whatever
    -- other holds did to the hash's expiry.
    if redis.call('PTTL', s .. 'm') < lease then
      redis.call('PEXPIRE', s .. 'm', lease)
    end
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
