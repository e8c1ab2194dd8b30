     -- The fence flushed to disk at every grant, for a table without the epoch's tables (made
     -- by an older version, or a role not granted them): epoch_fence.sql without the epoch.
     need AS (SELECT true AS bump),
     f AS (INSERT INTO {table} AS t (name, fence) SELECT $2, 1 FROM gr WHERE gr.granted
           ON CONFLICT (name) DO UPDATE SET fence = t.fence + 1
           RETURNING t.fence)
