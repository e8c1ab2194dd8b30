-- End a lock wait from another connection (our own user's backends may always be cancelled).
-- A backend that is not running a statement ignores it.
SELECT pg_cancel_backend($1)
