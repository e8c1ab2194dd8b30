-- Named mode, MySQL: the first note of a hold opens the transaction the note lives in (see
-- notes_session_insert.sql); the release rolls it back before RELEASE_ALL_LOCKS.
BEGIN
