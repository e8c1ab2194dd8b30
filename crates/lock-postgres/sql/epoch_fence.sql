     -- The fence, without a disk flush per grant (spliced into try_lock.sql, lock_wait.sql and
     -- xact_fence.sql in the place of the fence placeholder; `gr.granted` says whether the statement grants, and `need`
     -- whether its commit must be flushed before the answer).
     --
     -- A grant bumps the name's counter as before, but its commit is asynchronous: a crash may
     -- lose the last bumps, and the counter would then hand out a fence again. So every fence
     -- is at least the epoch's floor (epoch << 40), and the epoch moves past every fence that a
     -- crash could have lost: its copy in the unlogged {table}_boot is gone after a crash, and
     -- the first grant to find it gone bumps the durable epoch (committed with a flush before
     -- it is answered, and visible to others only then) and puts the copy back. A counter
     -- about to reach the next epoch's floor bumps it too, so 2^40 grants of one name fit in
     -- an epoch. Two grants that both find the copy gone bump twice: a wasted epoch, no harm.
     b AS (SELECT epoch FROM {table}_boot),
     need AS (SELECT gr.granted AND (NOT EXISTS (SELECT 1 FROM b)
                     OR coalesce((SELECT fence FROM {table} WHERE name = $2), 0) + 1
                        >= ((SELECT epoch FROM b) + 1) << 40) AS bump
              FROM gr),
     e AS (INSERT INTO {table}_epoch AS x (one, epoch) SELECT true, 1 FROM need WHERE need.bump
           ON CONFLICT (one) DO UPDATE SET epoch = x.epoch + 1
           RETURNING x.epoch),
     eb AS (INSERT INTO {table}_boot AS y (one, epoch) SELECT true, epoch FROM e
            ON CONFLICT (one) DO UPDATE SET epoch = greatest(y.epoch, excluded.epoch)),
     fl AS (SELECT coalesce((SELECT epoch FROM e), (SELECT epoch FROM b), 0) << 40 AS floor),
     f AS (INSERT INTO {table} AS t (name, fence) SELECT $2, greatest(1, fl.floor) FROM gr, fl WHERE gr.granted
           ON CONFLICT (name) DO UPDATE SET fence = greatest(t.fence + 1, excluded.fence)
           RETURNING t.fence)
