-- Third part of the prelude of handoff.lua (appended to it by the crate, not loaded alone): the
-- end of a wait without a guard, as both cancel scripts take it.

-- end_wait(lock, queue, deadlines, owner, tag, channel, claim_ms, counter, taken): the wait of
-- `owner` (waiter `tag`) ended without a guard: it leaves the wait set, is marked left (so a
-- late copy of one of its attempts does not register it again), gives up a permit handed to it
-- and not taken (`taken`: the fence of a hand-over its client took, '' for none), and leaves
-- the readers. Returns whether that left the lock free of every hold (leave_reads).
local function end_wait(lock, queue, deadlines, owner, tag, channel, claim_ms, counter, taken)
  leave(queue, deadlines, owner, tag)
  mark_left(lock, owner)
  leave_permits(lock, owner, channel, claim_ms, counter, taken)
  return leave_reads(lock, owner)
end
