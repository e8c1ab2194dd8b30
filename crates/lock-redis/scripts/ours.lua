-- Shared prelude of the scripts that tell our holds from the other library's in the interop
-- modes (prepended by the crate, not loaded alone).

-- ours(v): whether a plain lock value was written by this crate: owner token and attempt nonce
-- (64 hex digits), maybe followed by ':' and a note (set_note.lua). redis-py's token (uuid1,
-- 32 hex digits) and python-redis-lock's (24 base64 characters) are never of that form, so a
-- hold of the other library's client is never taken for one of ours, whose fence the counter
-- holds.
local function ours(v)
  return #v >= 64 and string.find(string.sub(v, 1, 64), '^%x+$') ~= nil
    and (#v == 64 or string.sub(v, 65, 65) == ':')
end
