-- Reentrant / fair mode batched compare-and-extend.
-- KEYS[i] lock hash; ARGV[2i-1] owner token, ARGV[2i] new lease in ms
-- Returns one flag per key: 1 extended, 0 not held by that owner.
local out = {}
for i, key in ipairs(KEYS) do
  if redis.call('HEXISTS', key, ARGV[2 * i - 1]) == 1 then
    redis.call('PEXPIRE', key, ARGV[2 * i])
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
