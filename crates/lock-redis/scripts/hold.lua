-- Shared prelude of the reentrant and fair acquire scripts (prepended by the crate after
-- fence.lua and handoff.lua, not loaded alone). The lock is a hash: owner token -> hold count, plus the fields
-- 'f' (fence of the outermost hold), 'n' (nonce of the last acquisition, for the
-- cancellation cleanup and for a resent attempt; a hand-over's client id, see handoff.lua),
-- 'h' (nonce of the attempt that made the first hold or claimed a hand-over: the next attempt
-- of the same acquisition may nest on it before its undo runs, which then finds it here),
-- 'r' (nonce of the last release that left a hold, for a resent release) and 'm' (the holder's
-- note, set_note.lua). Owner tokens are 32 hex digits, so they never collide with these.

-- nest(lock, owner, lease, nonce): if owner holds the lock, one more hold, this attempt's nonce
-- recorded and the expiry moved later (never earlier: a short nested lease must not cut a long
-- outer one); returns the outer hold's fence, or nil when owner does not hold the lock.
-- Each nesting also leaves a mark of its own nonce for as long as its lease (nested_mark): the
-- field 'n' keeps only the last nonce, so without the mark the cleanup of a nested attempt
-- whose answer never came could not undo its count once a later nesting had run, and the
-- lock would outlive its last release. An attempt that already ran (a driver resends a
-- request whose answer it did not get) finds its mark and counts nothing more.
local function nest(lock, owner, lease, nonce)
  if redis.call('HEXISTS', lock, owner) == 0 then
    return nil
  end
  -- Its own nonce in 'n' or 'h' is this attempt's first hold or claim, run already.
  if redis.call('HGET', lock, 'n') ~= nonce and redis.call('HGET', lock, 'h') ~= nonce
    and redis.call('SET', nested_mark(lock, nonce), 1, 'NX', 'PX', lease) then
    redis.call('HINCRBY', lock, owner, 1)
    redis.call('HSET', lock, 'n', nonce)
  end
  if redis.call('PTTL', lock) < lease then
    redis.call('PEXPIRE', lock, lease)
  end
  return tonumber(redis.call('HGET', lock, 'f'))
end

-- hold(lock, counter, owner, lease, nonce): the first hold of a free lock, with the next fence
-- drawn from counter; returns that fence.
local function hold(lock, counter, owner, lease, nonce)
  local f = next_fence(counter)
  redis.call('HSET', lock, owner, 1, 'f', fence_string(f), 'n', nonce, 'h', nonce)
  redis.call('PEXPIRE', lock, lease)
  return f
end
