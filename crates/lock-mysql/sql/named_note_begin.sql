-- Named mode: the first note of a hold opens the transaction the note lives in (see
-- notes_session_insert.sql); the release rolls it back before RELEASE_ALL_LOCKS. The session's
-- idle bounds were set when its connection was opened (named_session*.sql).
BEGIN
