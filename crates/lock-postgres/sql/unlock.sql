-- Release. $1 the advisory key. The session gets its own idle_session_timeout back before the
-- connection returns to the pool.
SELECT pg_advisory_unlock($1) AS released,
       set_config('idle_session_timeout',
                  (SELECT reset_val FROM pg_settings WHERE name = 'idle_session_timeout'), false)
