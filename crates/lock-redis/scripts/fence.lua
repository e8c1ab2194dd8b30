-- Shared prelude of the acquire scripts (prepended by the crate, not loaded alone).
--
-- next_fence(counter): the lock's next fencing token, as a decimal string. INCR on the lock's
-- counter key; a missing counter (first use of the name, or a server restarted without
-- persistence) starts at the server clock in microseconds, so tokens keep growing across such a
-- restart as long as the server clock does (one INCR takes far longer than a microsecond).
-- Strings, not Lua numbers, go back to Redis: Lua would print 1.7e15 as "1.7e+15".
local function next_fence(counter)
  local f = redis.call('INCR', counter)
  if f == 1 then
    local t = redis.call('TIME')
    local s = t[1] .. string.format('%06d', tonumber(t[2]))
    redis.call('SET', counter, s)
    return s
  end
  return string.format('%.0f', f)
end
