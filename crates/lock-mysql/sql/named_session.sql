-- Named mode, MySQL. Run once on every connection of the backend's private pool of holding
-- connections, when it is opened (never on a pool the user shares): bound how long the server
-- lets the session sit idle, or stall in the middle of a packet, while it may hold the lock (it
-- then ends the session, which releases every GET_LOCK of it; the keeper pings well within the
-- bound). Set once rather than around every hold: setting and restoring them cost a statement
-- each per acquisition. No transaction is opened: a GET_LOCK lock belongs to the session, not
-- to a transaction. {idle} is a number of seconds filled in by the backend.
SET SESSION wait_timeout = {idle}, net_read_timeout = {idle}, net_write_timeout = {idle}
