-- Release of a shared hold. $1 the advisory key, $2 the session's idle_session_timeout from
-- before the grant.
SELECT pg_advisory_unlock_shared($1) AS released, set_config('idle_session_timeout', $2, false)
