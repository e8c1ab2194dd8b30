-- Named mode: who holds the name, without taking it: the holder's connection id, or NULL.
SELECT IS_USED_LOCK(?)
