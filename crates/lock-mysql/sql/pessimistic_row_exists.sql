-- Plain MVCC read: never waits behind a holder's FOR UPDATE.
SELECT 1 FROM `{table}` WHERE name = ?
