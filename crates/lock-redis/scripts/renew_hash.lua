-- Reentrant / fair mode batched compare-and-extend. The expiry only ever moves later: nested
-- holds of one owner may carry different leases, and the shortest must not cut the longest.
-- KEYS[i] lock hash; ARGV[2i-1] owner token, ARGV[2i] new lease in ms
-- Returns one flag per key: 1 held by that owner (lease now at least the new one), 0 not held.
local out = {}
for i, key in ipairs(KEYS) do
  if redis.call('HEXISTS', key, ARGV[2 * i - 1]) == 1 then
    local lease = tonumber(ARGV[2 * i])
    if redis.call('PTTL', key) < lease then
      redis.call('PEXPIRE', key, lease)
    end
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
