-- Simple mode compare-and-delete.
-- KEYS[1] lock key; ARGV[1] owner token, ARGV[2] release channel
-- Returns 2 when released (and PUBLISHes the release), 0 when the owner did not hold the key.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', ARGV[2], '')
  return 2
end
return 0
