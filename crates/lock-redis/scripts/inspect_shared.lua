-- The live shared holds of a lock (handoff.lua), for dlock status when the lock itself is free.
-- KEYS[1] lock. Returns {count, ms until the last of them ends (-2: none), permits}: for a
-- semaphore's permits (handoff.lua) a flat list of owner token, 'slot:fence', ms left and
-- holder note (set_note.lua: '' for none, else ':' followed by the note) per live permit, as
-- strings; empty for readers.
local s = KEYS[1] .. ':s'
local now = now_ms()
local count, last, permits = 0, -2, {}
local kv = redis.call('HGETALL', s)
for i = 1, #kv, 2 do
  local left = tonumber(kv[i + 1]) - now
  if left > 0 then
    count = count + 1
    if left > last then last = left end
    local e = redis.call('HGET', s .. 'n', kv[i])
    if e then
      table.insert(permits, kv[i])
      table.insert(permits, e)
      table.insert(permits, tostring(left))
      local note = redis.call('HGET', s .. 'm', kv[i])
      table.insert(permits, note and (':' .. note) or '')
    end
  end
end
return {count, last, permits}
