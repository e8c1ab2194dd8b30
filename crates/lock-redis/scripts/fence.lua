-- Shared prelude of the acquire scripts (prepended by the crate, not loaded alone).

-- fence_string(f): the decimal digits of a token, for storing it in Redis (Lua would print
-- 1.7e15 as "1.7e+15").
local function fence_string(f)
  return string.format('%.0f', f)
end

-- next_fence(counter): the lock's next fencing token, as a Lua number. INCR on the lock's
-- counter key; a missing counter (first use of the name, a server restarted without
-- persistence, or a counter that expired) starts at the server clock in microseconds, so tokens
-- keep growing across a restart or an expiry as long as the server clock does (one INCR takes
-- far longer than a microsecond, so a counter never runs ahead of the clock). That is what lets
-- the counter expire a day after it was created (INCR keeps the TTL): counters of keys nobody
-- uses any more do not pile up, and a key in use just starts again from the clock.
-- Tokens stay far below 2^53, so the number is exact and Redis turns it back into the same
-- integer reply. The common path is INCR alone: formatting and parsing a string in Lua costs
-- more server time than the INCR itself, so only the rare initialisation does it.
local function next_fence(counter)
  local f = redis.call('INCR', counter)
  if f == 1 then
    local t = redis.call('TIME')
    f = tonumber(t[1]) * 1000000 + tonumber(t[2])
    redis.call('SET', counter, fence_string(f), 'PX', 86400000)
  end
  return f
end
