-- Look at a lock without touching it (dlock status).
-- KEYS[1] lock, KEYS[2] fence counter, KEYS[3] fair queue (same hash tag)
-- Returns {held 0/1, PTTL, owner token or '', fence or '', waiters in the fair queue}.
local t = redis.call('TYPE', KEYS[1])['ok']
local pttl = redis.call('PTTL', KEYS[1])
local waiters = redis.call('LLEN', KEYS[3])
if t == 'string' then
  -- Simple mode: the value is owner token + attempt nonce; the counter's last value is the
  -- holder's fence (no acquisition happens while it holds).
  local v = redis.call('GET', KEYS[1])
  return {1, pttl, string.sub(v, 1, 32), redis.call('GET', KEYS[2]) or '', waiters}
elseif t == 'hash' then
  local owner = ''
  local fields = redis.call('HKEYS', KEYS[1])
  for _, f in ipairs(fields) do
    if f ~= 'f' and f ~= 'n' then owner = f end
  end
  return {1, pttl, owner, redis.call('HGET', KEYS[1], 'f') or '', waiters}
end
return {0, -2, '', '', waiters}
