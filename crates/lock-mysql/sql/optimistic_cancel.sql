-- Sent in the background when an acquisition is cancelled after its statement may have been
-- sent: frees the row if that attempt took it. Owner tokens are unique per acquisition, and it
-- is only armed for owners that held nothing on this key before the attempt.
UPDATE `{table}` SET owner = NULL, expires_at = NULL, holds = 0 WHERE name = ? AND owner = ?
