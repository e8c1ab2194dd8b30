-- Named mode: end a hold (or a failed attempt) before the connection goes back to the backend's
-- private pool of holding connections (whose sessions keep the holds' idle bounds). The
-- connection carries exactly one GET_LOCK of one hold (nesting is counted in the client), so
-- releasing every lock of the session releases exactly it, and a connection never returns to
-- the pool holding a named lock, even one granted by an answer the client did not see.
-- (RELEASE_ALL_LOCKS: MySQL 5.7+, MariaDB 10.5+.)
DO RELEASE_ALL_LOCKS()
