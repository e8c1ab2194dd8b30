-- MariaDB. One round trip: bound how long the server lets this session sit idle, or stall in
-- the middle of a packet, while it holds the lock (it then ends the session and frees the row;
-- the keeper pings well within it) and open the holding transaction. The backend appends the
-- lock statement to the same batch (an attempt that finds the row held then asks
-- SELECT CONNECTION_ID(), for KILL QUERY of an overdue wait). The idle-transaction timeouts are
-- set to the same bound so that a lower server-wide value cannot end the session earlier than
-- the client expects. {idle} is a number of seconds filled in by the backend.
SET SESSION wait_timeout = {idle}, net_read_timeout = {idle}, net_write_timeout = {idle},
    idle_transaction_timeout = {idle}, idle_readonly_transaction_timeout = {idle},
    idle_write_transaction_timeout = {idle};
BEGIN
