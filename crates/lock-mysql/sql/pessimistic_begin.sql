-- One round trip: open the holding transaction and learn the connection id (for KILL QUERY
-- of an overdue wait and for diagnostics).
BEGIN; SELECT CONNECTION_ID()
