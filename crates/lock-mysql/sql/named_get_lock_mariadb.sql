-- Named mode, MariaDB: take the lock, or wait for it up to {timeout} seconds (0 = try once;
-- fractional seconds are honoured), and on a grant draw the fencing token in the same statement.
-- The simple CASE evaluates GET_LOCK once and only the matching branch: NEXTVAL runs only for a
-- grant (tokens follow grant order; NEXTVAL is not transactional, so a token is never handed
-- out twice). Answers the token (>= 1), 0 (held by another session: timeout) or -1 (GET_LOCK
-- answered NULL: the wait was killed, or an error), and the connection id (for KILL QUERY).
-- {name} is CONVERT(X'..' USING utf8mb4) (hex digits only; the same string a client sending
-- the name as utf8mb4 text uses); sent as text.
SELECT CASE GET_LOCK({name}, {timeout}) WHEN 1 THEN NEXTVAL(`{table}_fence`) WHEN 0 THEN 0 ELSE -1 END,
       CONNECTION_ID()
