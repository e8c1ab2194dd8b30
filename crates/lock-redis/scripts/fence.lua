-- Shared prelude of the acquire scripts (prepended by the crate, not loaded alone).

-- fence_string(f): the decimal digits of a token, for storing it in Redis (Lua would print
-- 1.7e15 as "1.7e+15").
local function fence_string(f)
  return string.format('%.0f', f)
end

-- next_fence(counter): the lock's next fencing token, as a Lua number. INCR on the lock's
-- counter key; a missing counter (first use of the name, or a server restarted without
-- persistence) starts at the server clock in microseconds, so tokens keep growing across such a
-- restart as long as the server clock does (one INCR takes far longer than a microsecond).
-- Tokens stay far below 2^53, so the number is exact and Redis turns it back into the same
-- integer reply. The common path is INCR alone: formatting and parsing a string in Lua costs
-- more server time than the INCR itself, so only the rare initialisation does it.
local function next_fence(counter)
  local f = redis.call('INCR', counter)
  if f == 1 then
    local t = redis.call('TIME')
    f = tonumber(t[1]) * 1000000 + tonumber(t[2])
    redis.call('SET', counter, fence_string(f))
  end
  return f
end
