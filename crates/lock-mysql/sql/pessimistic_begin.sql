-- One round trip: bound how long the server lets this session sit idle while it holds the lock
-- (it then ends the session and frees the row; the keeper pings well within it), open the
-- holding transaction, and learn the connection id (for KILL QUERY of an overdue wait and for
-- diagnostics). {wait_timeout} is a number of seconds filled in by the backend.
SET SESSION wait_timeout = {wait_timeout}; BEGIN; SELECT CONNECTION_ID()
