-- Simple mode batched compare-and-extend (the watchdog sends up to 100 locks per call).
-- KEYS[i] lock key; ARGV[2i-1] owner token, ARGV[2i] new lease in ms
-- Returns one flag per key: 1 extended, 0 not held by that owner.
local out = {}
for i, key in ipairs(KEYS) do
  if redis.call('GET', key) == ARGV[2 * i - 1] then
    redis.call('PEXPIRE', key, ARGV[2 * i])
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
