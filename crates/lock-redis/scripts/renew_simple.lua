-- Simple mode batched compare-and-extend (the watchdog sends up to 100 locks per call). The
-- expiry only ever moves later: a shorter renewal never cuts a longer lease.
-- KEYS[i] lock key; ARGV[2i-1] owner token (a prefix of the value), ARGV[2i] new lease in ms
-- Returns one flag per key: 1 held by that owner (lease now at least the new one), 0 not held.
local out = {}
for i, key in ipairs(KEYS) do
  local owner, lease = ARGV[2 * i - 1], tonumber(ARGV[2 * i])
  local v = redis.call('GET', key)
  if v and string.sub(v, 1, #owner) == owner then
    if redis.call('PTTL', key) < lease then
      redis.call('PEXPIRE', key, lease)
    end
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
