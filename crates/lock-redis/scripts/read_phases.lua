-- Second part of the prelude of handoff.lua (appended to it by the crate, not loaded alone):
-- the phases of a read-write lock's readers.
--
-- The lock is phase-fair: a refused waiting reader registers in '<lock>:rq' (owner token ->
-- liveness deadline, pushed forward by each of its attempts), and a freed write lets every
-- registered reader in at once (let_readers_in: a read phase) before the next writer, who then
-- waits for those readers only; readers that come while a writer waits register, and go in
-- when it is done. So a stream of writers cannot starve readers (a freed lock no longer passes
-- from writer to writer while readers wait), nor readers writers. A reader let in holds for a
-- claim window (never past its deadline), noted in '<lock>:sr' until an attempt of its claims
-- it; the release publishes '' on the lock's channel, which wakes them all (readers do not
-- exclude each other, so there is no herd to avoid).

-- register_reader(lock, owner, deadline, keep): registers a refused waiting reader (or pushes
-- its deadline forward); the set lives at least `keep` ms.
local function register_reader(lock, owner, deadline, keep)
  local rq = lock .. ':rq'
  redis.call('ZADD', rq, deadline, owner)
  live_for({rq}, keep)
end

-- claim_read(lock, owner): a reader's attempt holds: it waits no more, and a read let in for it
-- (let_readers_in) is its own now.
local function claim_read(lock, owner)
  redis.call('ZREM', lock .. ':rq', owner)
  redis.call('HDEL', lock .. ':sr', owner)
end

-- let_readers_in(lock, now, claim_ms): a read phase: every live registered reader holds (for
-- at most claim_ms, and never past its own deadline) and waits no more. A reader whose
-- acquisition was released or undone meanwhile (its done mark, release_shared.lua) is skipped.
-- Returns whether anyone was let in.
let_readers_in = function(lock, now, claim_ms)
  local rq = lock .. ':rq'
  local kv = redis.call('ZRANGEBYSCORE', rq, '(' .. now, '+inf', 'WITHSCORES')
  redis.call('DEL', rq)
  local s = lock .. ':s'
  local longest = 0
  for i = 1, #kv, 2 do
    local owner = kv[i]
    if not done(lock, owner) then
      local claim = math.max(1, math.min(claim_ms, tonumber(kv[i + 1]) - now))
      redis.call('HSET', s, owner, now + claim)
      redis.call('HSET', s .. 'r', owner, 1)
      if claim > longest then longest = claim end
    end
  end
  if longest == 0 then return false end
  live_for({s, s .. 'r'}, longest)
  return true
end

-- leave_reads(lock, owner): a reader's wait ended without a guard: it waits no more, and a read
-- let in for it and not claimed goes. Its owner is marked done, as by its release: a copy of
-- one of its attempts still on its way neither registers nor holds. Returns whether that left
-- the lock free of every hold (the caller hands it over).
local function leave_reads(lock, owner)
  local s = lock .. ':s'
  local waited = redis.call('ZREM', lock .. ':rq', owner) == 1
  local let_in = redis.call('HEXISTS', s .. 'r', owner) == 1
  if not (waited or let_in) then return false end
  mark_done(lock, owner, 0)
  if not let_in then return false end
  drop_shared(s, owner)
  return not readers_left(lock) and redis.call('EXISTS', lock) == 0
end

-- wake_readers(lock, deadlines, channel): after a writer left the wait set: readers it kept out
-- (registered, the lock free and no other writer waiting) wake and come in.
local function wake_readers(lock, deadlines, channel)
  if redis.call('EXISTS', lock .. ':rq') == 1 and redis.call('EXISTS', lock) == 0
    and not writer_waits(deadlines, now_ms()) then
    redis.call('PUBLISH', channel, '')
  end
end
