-- Look at a lock without touching it (dlock status).
-- KEYS[1] lock, KEYS[2] fence counter, KEYS[3] queue list of waiters (same hash tag); the
-- interop modes send KEYS[1] and KEYS[2] only (there is no queue), and a fence only for a hold
-- of ours (ours.lua): the other library's client draws none.
-- Returns {held 0/1, PTTL, owner token or '', fence or '', registered waiters (-1: unknown)}.
-- A lock handed over to a waiter (handoff.lua) shows as held by that waiter, with the fence the
-- hand-over drew.
local native = #KEYS == 3
local t = redis.call('TYPE', KEYS[1])['ok']
local pttl = redis.call('PTTL', KEYS[1])
local waiters = native and redis.call('LLEN', KEYS[3]) or -1
if t == 'string' then
  -- Simple mode: the value is owner token + attempt nonce; the counter's last value is the
  -- holder's fence (no acquisition happens while it holds).
  local v = redis.call('GET', KEYS[1])
  local fence = ''
  if native or ours(v) then
    fence = redis.call('GET', KEYS[2]) or ''
  end
  return {1, pttl, string.sub(v, 1, 32), fence, waiters}
elseif t == 'hash' then
  local owner = ''
  local fields = redis.call('HKEYS', KEYS[1])
  for _, f in ipairs(fields) do
    if #f == 32 then owner = f end
  end
  return {1, pttl, owner, redis.call('HGET', KEYS[1], 'f') or '', waiters}
end
return {0, -2, '', '', waiters}
