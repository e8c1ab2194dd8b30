-- MySQL. One round trip: bound how long the server lets this session sit idle, or stall in
-- the middle of a packet, while it holds the lock (it then ends the session and frees the row;
-- the keeper pings well within it) and open the holding transaction. The backend appends the
-- lock statement to the same batch (an attempt that finds the row held then asks
-- SELECT CONNECTION_ID(), for KILL QUERY of an overdue wait). {idle} is a number of seconds
-- filled in by the backend.
SET SESSION wait_timeout = {idle}, net_read_timeout = {idle}, net_write_timeout = {idle}; BEGIN
