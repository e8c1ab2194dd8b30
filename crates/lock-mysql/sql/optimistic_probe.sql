-- After a lost race: who holds it, and for how much longer (the waiter's retry hint).
SELECT owner, version, TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at)
  FROM `{table}` WHERE name = ?
