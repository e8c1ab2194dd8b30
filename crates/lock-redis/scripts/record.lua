-- A record (lock_core::backend::RecordOp): a number in a string and a set of marks, next to
-- nothing else, in the record key's slot. Every op is idempotent: a resent init or set stores
-- the same number, a resent mark finds its token already in the set. A change publishes ''
-- on the key's channel, which wakes a latch's waiters (they subscribe like lock waiters).
-- KEYS[1] the number, KEYS[2] the marks; ARGV[1] get | init | set | mark | delete,
-- ARGV[2] the number or the token, ARGV[3] the channel
-- Returns {number or '', marks}.
local number, marks, op, arg = KEYS[1], KEYS[2], ARGV[1], ARGV[2]
if op == 'init' then
  redis.call('SET', number, arg, 'NX')
elseif op == 'set' then
  redis.call('SET', number, arg)
elseif op == 'mark' then
  -- Without a number nothing is counted: a late count-down of a deleted latch leaves no key.
  if redis.call('EXISTS', number) == 1 then
    redis.call('SADD', marks, arg)
  end
elseif op == 'delete' then
  redis.call('DEL', number, marks)
end
if op ~= 'get' then
  redis.call('PUBLISH', ARGV[3], '')
end
return {redis.call('GET', number) or '', redis.call('SCARD', marks)}
