-- Simple mode compare-and-delete. The value is the owner token (32 hex digits) followed by the
-- attempt's nonce: a release names the owner and matches the prefix, the cleanup of one
-- attempt names owner and nonce and matches only the grant that attempt made.
-- KEYS[1] lock key; ARGV[1] owner token, or owner token and nonce; ARGV[2] release channel
-- Returns 2 when released (and PUBLISHes the release), 0 when the owner did not hold the key.
local v = redis.call('GET', KEYS[1])
if v and string.sub(v, 1, #ARGV[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', ARGV[2], '')
  return 2
end
return 0
