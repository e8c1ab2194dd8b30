-- Shared prelude of the scripts that free a lock or wait for one (prepended by the crate, not
-- loaded alone): the wait set and the direct hand-over to one waiter.
--
-- Waiters of every mode register in the 'queue' list (arrival order; each entry is the owner
-- token, 32 hex digits, followed by the waiter's tag: the id of its client, 32 hex digits, and
-- the inbox channel of that client, if it has one) and the 'waiters' sorted set (owner token ->
-- liveness deadline in server ms, pushed forward by each attempt of a live waiter). When a lock
-- is freed and a live waiter is registered, the freeing script grants it to exactly one of
-- them: a real hold of that waiter, marked with the id of its client in place of an attempt's
-- nonce (the hash field 'n', or the string value's second half), a fence drawn now, and an
-- expiry of a short claim window (never past the waiter's own deadline), so a vanished waiter
-- blocks the key for at most that long. The mark names the client, not just the owner: only
-- that client knows whether its waiter took the hold, so only that client may claim it or give
-- it up; to any other client of the same owner it is a hold like any other (a nesting counts).
-- The PUBLISH goes to the inbox of that waiter's client only, or without an inbox to the lock's
-- channel; only that waiter wakes: one wake-up per release, not the herd. Its payload is
-- `token:fence:window:deadline` (and `:lock` on an inbox): the waiter saw its own deadline `deadline` in the reply of an attempt it sent at a time it noted, and
-- the grant came after that attempt ran, so the hold lasts at least `window` from that send.
-- The waiter holds at once, without a round trip, when enough of that is left (its watchdog
-- then extends the hold to the lease it asked for); else its next attempt claims the hold
-- (a new nonce, the full lease). Without a registered waiter the payload is empty and wakes
-- anyone (waiters that do not register, such as Redlock members).

-- nested_mark(lock, nonce): the key marking the nesting made by the attempt with `nonce`
-- (hold.lua), in the lock's slot.
local function nested_mark(lock, nonce)
  return lock .. ':a:' .. nonce
end

-- client_of(tag): the client id at the head of a waiter's tag (see above).
local function client_of(tag)
  return string.sub(tag, 1, 32)
end

-- listening(tag): whether the client of a waiter's tag can still hear a hand-over. With an
-- inbox, only while something subscribes to it: a client's subscriber connection closes with
-- its process, so a waiter killed without warning (no clean-up) is passed over at once instead
-- of being handed the key for a claim window, one dead waiter after another. Without an inbox
-- (a cluster, notifications off), or when the server will not say (an ACL without PUBSUB), the
-- liveness deadline alone decides. A live waiter passed over while its client resubscribes
-- (a reconnection, a failover) loses its place only: its next attempt queues it again.
local function listening(tag)
  local inbox = tag and string.sub(tag, 33) or ''
  if inbox == '' then return true end
  local r = redis.pcall('PUBSUB', 'NUMSUB', inbox)
  if type(r) ~= 'table' or r.err then return true end
  return tonumber(r[2]) ~= 0
end

-- live_deadline(entry, deadlines, now, own): the liveness deadline of the waiter of a queue
-- entry (token, then tag), or nil for a dead one: its deadline passed, or nobody listens for
-- it. `own` (optional) is the token of the attempt running the script, alive by that attempt.
local function live_deadline(entry, deadlines, now, own)
  local w = string.sub(entry, 1, 32)
  local d = redis.call('ZSCORE', deadlines, w)
  if d and tonumber(d) > now and (w == own or listening(string.sub(entry, 33))) then
    return tonumber(d)
  end
  return nil
end

-- next_waiter(queue, deadlines, now): takes the first live waiter out of the queue and the
-- deadline set and returns its token, deadline and tag, or nil. Dead entries met on the way go
-- too.
local function next_waiter(queue, deadlines, now)
  while true do
    local head = redis.call('LPOP', queue)
    if not head then return nil end
    local d = live_deadline(head, deadlines, now)
    redis.call('ZREM', deadlines, string.sub(head, 1, 32))
    if d then return string.sub(head, 1, 32), d, string.sub(head, 33) end
  end
end

-- Shared holds (the read side of a read-write lock, acquire_shared.lua) live in '<lock>:s', a hash of
-- owner token -> expiry in server ms, which expires with its last hold. Readers do not join the
-- wait set, so a live registered waiter there is an exclusive request waiting: it keeps new
-- readers out (writers are not starved), and the last reader to leave hands the lock to it.
-- Waiting readers register apart and go in phases (read_phases.lua), so readers are not
-- starved either.

-- A semaphore's permits are shared holds of its pool key, at most `permits` of them, with
-- '<lock>:sn' (owner token -> 'slot:fence', as long-lived as '<lock>:s') naming each live
-- hold's slot, the lowest free one when granted, and fence. A refused waiting request
-- registers in '<lock>:pq' (owner token -> liveness deadline, pushed forward by each of its
-- attempts, which answer it; a grant or the end of its wait takes it out) and '<lock>:pt'
-- (owner token -> its tag, as in the wait set above). A release hands its permit (the slot it
-- frees, a new fence) to the registered waiter with the earliest deadline: a hold of that
-- waiter for a claim window (never past its deadline), noted in '<lock>:sh' (owner token ->
-- the hand-over's fence) until an attempt of the waiter claims it or the hold ends, and
-- published as `token:fence:window:deadline/slot` to the inbox of the waiter's client (with
-- `:lock`), or without one on the lock's channel. As with the mutex (above), the waiter's
-- client holds it at once when enough of the window is left; its next attempt claims it
-- otherwise; the end of its wait without either gives it to the next. One freed permit serves
-- one waiter and wakes nobody else.

-- live_for(keys, ms): makes each of `keys` live at least `ms` more (never shortens).
local function live_for(keys, ms)
  for _, k in ipairs(keys) do
    if redis.call('PTTL', k) < ms then
      redis.call('PEXPIRE', k, ms)
    end
  end
end

-- publish_handed(lock, channel, tag, payload): tells a hand-over to the waiter's client, on
-- its inbox (the tag's tail, with the lock's name) or else on the lock's channel.
local function publish_handed(lock, channel, tag, payload)
  local inbox = tag and string.sub(tag, 33) or ''
  if inbox ~= '' then
    redis.call('PUBLISH', inbox, payload .. ':' .. lock)
  else
    redis.call('PUBLISH', channel, payload)
  end
end

-- register_permit_waiter(lock, owner, tag, deadline, keep): registers a refused permit request
-- (or pushes its deadline forward); both keys live at least `keep` ms.
local function register_permit_waiter(lock, owner, tag, deadline, keep)
  local pq, pt = lock .. ':pq', lock .. ':pt'
  if redis.call('ZADD', pq, deadline, owner) == 1 then
    redis.call('HSET', pt, owner, tag)
  end
  live_for({pq, pt}, keep)
end

-- unregister_permit_waiter(lock, owner): takes a permit request out of the wait set.
local function unregister_permit_waiter(lock, owner)
  if redis.call('ZREM', lock .. ':pq', owner) == 1 then
    redis.call('HDEL', lock .. ':pt', owner)
  end
end

-- hand_permit(lock, slot, channel, claim_ms, counter): grants the freed `slot` to the live
-- permit waiter with the earliest deadline (dropping dead ones, as next_waiter does) and
-- publishes it. Returns the
-- payload, '' for nobody.
local function hand_permit(lock, slot, channel, claim_ms, counter)
  local pq = lock .. ':pq'
  if redis.call('EXISTS', pq) == 0 then return '' end
  local now = now_ms()
  local w, d, tag
  while true do
    local first = redis.call('ZRANGE', pq, 0, 0, 'WITHSCORES')
    w, d = first[1], tonumber(first[2])
    if not w then return '' end
    tag = redis.call('HGET', lock .. ':pt', w)
    unregister_permit_waiter(lock, w)
    if d > now and listening(tag) then break end
  end
  local claim = math.max(1, math.min(claim_ms, d - now))
  local f = fence_string(next_fence(counter))
  local s = lock .. ':s'
  redis.call('HSET', s, w, now + claim)
  redis.call('HSET', s .. 'n', w, slot .. ':' .. f)
  redis.call('HSET', s .. 'h', w, f)
  live_for({s, s .. 'n', s .. 'h'}, claim)
  local payload = w .. ':' .. f .. ':' .. claim .. ':' .. fence_string(d) .. '/' .. slot
  publish_handed(lock, channel, tag, payload)
  return payload
end

-- drop_shared(s, owner): forgets `owner`'s shared hold in the hash `s`, its slot, hand-over
-- and holder note (set_note.lua).
local function drop_shared(s, owner)
  redis.call('HDEL', s, owner)
  redis.call('HDEL', s .. 'r', owner)
  redis.call('HDEL', s .. 'n', owner)
  redis.call('HDEL', s .. 'h', owner)
  redis.call('HDEL', s .. 'm', owner)
end

-- leave_permits(lock, owner, channel, claim_ms, counter, taken): a permit waiter's wait ended
-- without a guard. A permit handed to it and neither claimed by an attempt nor taken by its
-- client (`taken`: the fence of a hand-over it took, '' for none) goes to the next waiter.
local function leave_permits(lock, owner, channel, claim_ms, counter, taken)
  unregister_permit_waiter(lock, owner)
  local s = lock .. ':s'
  local handed = redis.call('HGET', s .. 'h', owner)
  if not handed or handed == taken then return end
  local held = tonumber(redis.call('HGET', s, owner))
  local e = redis.call('HGET', s .. 'n', owner)
  drop_shared(s, owner)
  if held and held > now_ms() and e then
    hand_permit(lock, string.match(e, '^(%d+):'), channel, claim_ms, counter)
  end
end

-- readers_left(lock, except): ms until the first live shared hold of `lock` ends (other than
-- the upgrading reader `except`'s, if given) and the server time, or nil for none (one EXISTS
-- when there are none). Expired holds met on the way are dropped. A lock and shared holds of
-- it never exist together (each refuses the other), except an upgraded reader's read and
-- write, which it releases together.
local function readers_left(lock, except)
  local s = lock .. ':s'
  if redis.call('EXISTS', s) == 0 then return nil end
  local now = now_ms()
  local first = nil
  local kv = redis.call('HGETALL', s)
  for i = 1, #kv, 2 do
    local left = tonumber(kv[i + 1]) - now
    if left <= 0 then
      drop_shared(s, kv[i])
    elseif kv[i] ~= except and (not first or left < first) then
      first = left
    end
  end
  if first then return first, now end
  return nil
end

-- An upgrade (the write side asked by the holder of a read, `except` in the acquire scripts)
-- waits like any writer, registered; refused, it notes '<lock>:up' = reader token .. its own
-- token, so that the release leaving its read the only one wakes it by name.

-- wake_upgrader(lock, channel): after a reader left and others remain: if they are only the
-- read of a waiting upgrade, wake that upgrade.
local function wake_upgrader(lock, channel)
  local up = redis.call('GET', lock .. ':up')
  if not up then return end
  local s = lock .. ':s'
  if redis.call('HLEN', s) == 1 and redis.call('HEXISTS', s, string.sub(up, 1, 32)) == 1 then
    redis.call('PUBLISH', channel, string.sub(up, 33))
  end
end

-- free_permit(lock, permits, now, counter): nil and the 'slot:fence' of a new permit (the
-- lowest free slot, a fence drawn now) when fewer than `permits` live shared holds exist, else
-- ms until the first of them ends.
local function free_permit(lock, permits, now, counter)
  local s = lock .. ':s'
  local used, live, first = {}, 0, nil
  local kv = redis.call('HGETALL', s)
  for i = 1, #kv, 2 do
    local left = tonumber(kv[i + 1]) - now
    if left > 0 then
      live = live + 1
      if not first or left < first then first = left end
      local e = redis.call('HGET', s .. 'n', kv[i])
      if e then used[tonumber(string.match(e, '^(%d+):'))] = true end
    else
      drop_shared(s, kv[i])
    end
  end
  if live < permits then
    for slot = 0, permits - 1 do
      if not used[slot] then
        return nil, slot .. ':' .. fence_string(next_fence(counter))
      end
    end
  end
  return first or -1
end

-- writer_waits(deadlines, now): whether a live waiter is registered (an exclusive request).
local function writer_waits(deadlines, now)
  return #redis.call('ZRANGEBYSCORE', deadlines, '(' .. now, '+inf', 'LIMIT', 0, 1) > 0
end

-- let_readers_in(lock, now, claim_ms): see read_phases.lua, the prelude's second part (it
-- needs this part's functions, and hand_over needs it).
local let_readers_in

-- hand_over(lock, counter, queue, deadlines, channel, claim_ms, hash, after_write): after
-- `lock` was deleted, grants it to the next live waiter (for at most claim_ms, and never past
-- the waiter's own deadline) and publishes the grant; publishes '' when nobody is registered.
-- After a write (`after_write`), the registered readers go first, all of them (a read phase,
-- let_readers_in), and '' is published to wake them; after a read phase, the next writer goes
-- (the readers that registered meanwhile wait for its release), or without one the readers.
-- Returns the payload ('' for nobody, or for readers).
local function hand_over(lock, counter, queue, deadlines, channel, claim_ms, hash, after_write)
  -- One read for the common case, nobody waiting: the two keys at once.
  local waiting = redis.call('EXISTS', lock .. ':rq', queue)
  if waiting == 0 then
    redis.call('PUBLISH', channel, '')
    return ''
  end
  local readers_wait = waiting == 2 or redis.call('EXISTS', lock .. ':rq') == 1
  local now = now_ms()
  -- Readers hold at a write's release only where it was an upgrade whose read is still to be
  -- released: the readers that waited for the write come in all the same.
  if readers_wait and after_write and let_readers_in(lock, now, claim_ms) then
    redis.call('PUBLISH', channel, '')
    return ''
  end
  -- Never an exclusive grant while readers hold (they cannot: a held lock refuses them, and
  -- the last of them hands over only when it leaves), checked all the same.
  if readers_left(lock) then
    redis.call('PUBLISH', channel, '')
    return ''
  end
  local w, d, tag = next_waiter(queue, deadlines, now)
  if not w then
    if readers_wait then
      let_readers_in(lock, now, claim_ms)
    end
    redis.call('PUBLISH', channel, '')
    return ''
  end
  local claim = math.max(1, math.min(claim_ms, d - now))
  local f = next_fence(counter)
  local client = client_of(tag)
  if hash then
    redis.call('HSET', lock, w, 1, 'f', fence_string(f), 'n', client)
    redis.call('PEXPIRE', lock, claim)
  else
    redis.call('SET', lock, w .. client, 'PX', claim)
  end
  local payload = w .. ':' .. fence_string(f) .. ':' .. claim .. ':' .. fence_string(d)
  publish_handed(lock, channel, tag, payload)
  return payload
end

-- leave(queue, deadlines, owner, tag): takes a waiter out of the wait set. Its entry may
-- carry its client's id alone: it registered before that client listened on its inbox.
local function leave(queue, deadlines, owner, tag)
  if redis.call('ZREM', deadlines, owner) == 1 then
    if redis.call('LREM', queue, 0, owner .. tag) == 0 then
      redis.call('LREM', queue, 0, owner .. client_of(tag))
    end
  end
end

-- handed_here(tag, mark, fence, taken): whether a hold marked `mark` with the fence `fence` is
-- a hand-over to the client of `tag` that this client has not taken (`taken` is the fence of
-- the hand-over it took on this key for this owner, '' for none). Such a hold is the waiter's
-- to claim or to give up; a taken one is a hold like any other.
local function handed_here(tag, mark, fence, taken)
  return mark == client_of(tag) and fence ~= taken
end

-- register(lock, queue, deadlines, owner, tag, now, wait_ms): joins the end of the queue, or
-- pushes this waiter's deadline forward; both keys outlive their last live waiter only briefly.
-- Returns the deadline set: the refused attempt answers it, and a hand-over names it; 0 when
-- the owner's wait ended already (left).
local function register(lock, queue, deadlines, owner, tag, now, wait_ms)
  if not redis.call('ZSCORE', deadlines, owner) then
    -- Only a first registration can come after the wait's end: a leave and a grant both take
    -- the owner out of the wait set, so a waiter still in it is waiting (and its refreshes,
    -- the common case, cost nothing more).
    if left(lock, owner) then
      return 0
    end
    redis.call('RPUSH', queue, owner .. tag)
  end
  redis.call('ZADD', deadlines, now + wait_ms, owner)
  live_for({queue, deadlines}, wait_ms * 2)
  return now + wait_ms
end

-- readers_refusal(lock, queue, deadlines, owner, tag, wait_ms, except): the answer of an
-- exclusive attempt while readers hold (then the lock does not exist), registering a waiting
-- one, which keeps new readers out and is handed the lock by the last reader to leave; nil
-- without readers. `except` ('' for none): the read of the upgrading owner, which does not
-- count, and whose upgrade is woken when it is the last read left.
local function readers_refusal(lock, queue, deadlines, owner, tag, wait_ms, except)
  local upgrade = except ~= nil and except ~= ''
  local readers, now = readers_left(lock, upgrade and except or nil)
  if not readers then
    if upgrade then redis.call('DEL', lock .. ':up') end
    return nil
  end
  local d = 0
  if wait_ms > 0 then
    d = register(lock, queue, deadlines, owner, tag, now, wait_ms)
    if upgrade and d > 0 then
      redis.call('SET', lock .. ':up', except .. owner, 'PX', wait_ms * 2)
    end
  end
  return {0, readers, d}
end
