-- Sent on a pooled connection (not the holding transaction) after the row lock is granted,
-- so tokens are handed out in grant order.
SELECT NEXTVAL(`{table}_fence`)
