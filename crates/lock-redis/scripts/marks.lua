-- First part of the prelude of handoff.lua (prepended to it by the crate, not loaded alone):
-- the server clock, and the marks of what already ran, so that a late copy of a request
-- (resent by a driver, or sent on a connection the driver has since replaced) changes
-- nothing.

-- now_ms(): the server clock in milliseconds.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- How long (ms) the nonce of an attempt whose answer never came is remembered: a copy of that
-- attempt that reaches the server after its cleanup ran (sent on a connection the driver has
-- since replaced, or resent) must not grant or register what nobody waits for.
local CANCELLED_MS = 300000

-- How long (ms) a release that freed a lock is remembered: a copy of it that runs later (a
-- driver resends a request whose answer it did not get; a paused server runs both copies when
-- it resumes) answers "released" instead of "not the owner", and never touches a hold the
-- first copy handed to a waiter of the same owner. Copies follow within the client's retry
-- window (its response timeout, a failover): seconds. One key per recently freed lock, '<lock>:r'
-- (the last such release's nonce only); the owner's end of wait (left) and the done marks of
-- shared holds below are kept as long.
local RELEASED_MS = 10000

-- The marks of what already ran, so that a late copy of it (resent by a driver, or sent on a
-- connection the driver has since replaced) changes nothing: the nonce of an attempt whose
-- answer never came and that was cleaned up (kept CANCELLED_MS), and the owner of a shared
-- hold released or given up, with what its release answered (kept RELEASED_MS; see
-- release_shared.lua). All of a lock's marks live in ONE sorted set, '<lock>:x' (member ->
-- server ms when written; the lock's hash tag, so its slot), never a key per mark: a burst
-- of cancellations or a stream of readers would otherwise leave one key each behind. Each
-- write trims what is older than CANCELLED_MS and then the oldest beyond MARKS_CAP, and the
-- set expires when no mark is wanted any more, so a lock's bookkeeping is one key of at most
-- MARKS_CAP members whatever the rate. The score is the age, not the expiry, so the cap drops
-- the oldest marks of either kind first (by expiry the short-lived release marks would go
-- before cancel marks 290 s older); a reader applies each kind's own lifetime.
-- Why MARKS_CAP: a mark matters while a copy of its request may still run, which is within
-- the client's retry window (its response timeout, 2 s by default, and a reconnect). A mark
-- leaves early only after MARKS_CAP newer marks of the same lock, so up to 1,000 marks a
-- second on one lock (cancellations and read releases together) it outlives that window.
-- Past it, a late copy of an attempt may take a hold nobody owns, which blocks the lock
-- until its lease ends (a delay, never two holders), and a resent read release answers "held
-- nothing". A full set is about 280 KB (MEMORY USAGE, Redis 7.0), and only on a lock that busy.
local MARKS_CAP = 2048

-- marked_since(lock, member, keep): whether `member` was marked on `lock` less than `keep` ms ago.
local function marked_since(lock, member, keep)
  local at = redis.call('ZSCORE', lock .. ':x', member)
  return at ~= false and tonumber(at) > now_ms() - keep
end

-- add_mark(lock, member, keep): marks `member` on `lock` for `keep` ms (see above).
local function add_mark(lock, member, keep)
  local x, now = lock .. ':x', now_ms()
  redis.call('ZADD', x, now, member)
  redis.call('ZREMRANGEBYSCORE', x, '-inf', '(' .. (now - CANCELLED_MS))
  redis.call('ZREMRANGEBYRANK', x, 0, -MARKS_CAP - 1)
  if redis.call('PTTL', x) < keep then
    redis.call('PEXPIRE', x, keep)
  end
end

-- cancelled(lock, nonce): whether the attempt with `nonce` on `lock` was cleaned up already.
local function cancelled(lock, nonce)
  return marked_since(lock, nonce, CANCELLED_MS)
end

-- mark_cancelled(lock, nonce): see cancelled().
local function mark_cancelled(lock, nonce)
  add_mark(lock, nonce, CANCELLED_MS)
end

-- left(lock, owner): the wait of `owner` ended less than RELEASED_MS ago: by a leave (the
-- cancel scripts without a nonce), or by a grant since released (mark_released). A copy of
-- one of its attempts that runs after that (sent on a connection since replaced, given up
-- before its undo ran) must not register it again: a release would then hand the lock to a
-- waiter nobody is, blocking it for a claim window. Found by the protocol model (src/model),
-- after a leave and after a release followed by another client's. An owner is one
-- acquisition's (random), so a mark never keeps a later wait out, unless a caller reuses its
-- owner within those seconds, whose wait is then polled, not handed over.
local function left(lock, owner)
  return marked_since(lock, owner .. ':left', RELEASED_MS)
end

-- mark_left(lock, owner): see left().
local function mark_left(lock, owner)
  add_mark(lock, owner .. ':left', RELEASED_MS)
end

-- released_by(lock, nonce): whether the release with `nonce` freed `lock` already.
local function released_by(lock, nonce)
  return redis.call('GET', lock .. ':r') == nonce
end

-- mark_released(lock, owner, nonce): the release with `nonce` of `owner` (an owner token, or
-- token and nonce: its first 32 characters) freed `lock`. A copy of it answers "released"
-- again (released_by), and the owner's wait is over (left).
local function mark_released(lock, owner, nonce)
  redis.call('SET', lock .. ':r', nonce, 'PX', RELEASED_MS)
  mark_left(lock, string.sub(owner, 1, 32))
end

-- done(lock, owner): what the release of `owner`'s shared hold on `lock` answered (0, 1 or 2,
-- release_shared.lua; 0 too when its wait was given up, leave_reads), or nil when none ran
-- in the last RELEASED_MS. The answer is part of the member ('<owner>:<answer>').
local function done(lock, owner)
  local at = redis.call('ZMSCORE', lock .. ':x', owner .. ':0', owner .. ':1', owner .. ':2')
  local since = now_ms() - RELEASED_MS
  for i = 1, 3 do
    if at[i] and tonumber(at[i]) > since then
      return i - 1
    end
  end
  return nil
end

-- mark_done(lock, owner, answer): see done(); the owner's earlier mark goes.
local function mark_done(lock, owner, answer)
  redis.call('ZREM', lock .. ':x', owner .. ':0', owner .. ':1', owner .. ':2')
  add_mark(lock, owner .. ':' .. answer, RELEASED_MS)
end
