-- Named mode (both flavors). Sent in one batch before named_get_lock*.sql: bound how long the
-- server lets this session sit idle, or stall in the middle of a packet, while it may hold the
-- lock (it then ends the session, which releases every GET_LOCK of it; the keeper pings well
-- within it). {idle} is a number of seconds filled in by the backend. No transaction is opened:
-- a GET_LOCK lock belongs to the session, not to a transaction.
SET SESSION wait_timeout = {idle}, net_read_timeout = {idle}, net_write_timeout = {idle}
