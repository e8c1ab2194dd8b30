-- Release. $1 the advisory key, $2 the session's idle_session_timeout from before the grant
-- (the granting statement read it): the connection goes back to the pool as it came out.
SELECT pg_advisory_unlock($1) AS released, set_config('idle_session_timeout', $2, false)
