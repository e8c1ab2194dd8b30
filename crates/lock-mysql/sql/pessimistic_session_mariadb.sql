-- MariaDB. Run once on every connection of the backend's private pool of holding connections,
-- when it is opened (never on a pool the user shares): bound how long the server lets the
-- session sit idle, or stall in the middle of a packet (it then ends the session and frees any
-- row it holds; the keeper pings well within the bound), and make the lock statement open the
-- holding transaction by itself (autocommit off), so that an acquisition is that one statement
-- and a release one COMMIT: setting the bounds and BEGIN per acquisition, and restoring the
-- bounds per release, cost ~100 µs of a ~290 µs pair. The idle-transaction timeouts are set to
-- the same bound so that a lower server-wide value cannot end a holder earlier than the client
-- expects. {idle} is a number of seconds filled in by the backend.
SET SESSION autocommit = 0, wait_timeout = {idle}, net_read_timeout = {idle}, net_write_timeout = {idle},
    idle_transaction_timeout = {idle}, idle_readonly_transaction_timeout = {idle},
    idle_write_transaction_timeout = {idle};
-- READ COMMITTED: a locking read of a missing row takes no gap lock, which under REPEATABLE
-- READ made many clients creating new keys at once give way to each other again and again.
-- A hold reads nothing but its own row, whose lock is the same at either level.
SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED
