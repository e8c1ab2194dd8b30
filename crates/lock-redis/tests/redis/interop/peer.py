"""The Python side of crates/lock-redis/tests/interop.rs: redis-py's `redis.lock.Lock` and
python-redis-lock's `redis_lock.Lock`, driven over stdin/stdout.

Usage: peer.py REDIS_URL. Prints `ready`, then reads one command per line and answers one line
per event, each starting with the command's name and lock id (a blocking acquire answers from
its own thread, so answers may interleave), and flushes after each.

  new ID redis-py|prl NAME TTL_MS   a lock object on NAME (TTL_MS 0: no expiry)
  try ID                            acquire(blocking=False)      -> try ID 1|0
  acquire ID WAIT_S                 blocking acquire in a thread -> acquire ID 1|0
  release ID                        release()                    -> release ID ok|<exception>
  foreign ID TOKEN                  release NAME as TOKEN        -> foreign ID ok|<exception>
  token ID                          the value it wrote           -> token ID <value>
  count ID N COUNTER                N times in a thread: blocking acquire, GET COUNTER,
                                    SET COUNTER +1 (not atomic: only the lock keeps it
                                    exact), release  -> count ID done <acquires refused>|<exception>
"""

import logging
import math
import sys
import threading

import redis
import redis_lock

# python-redis-lock logs every refused non-blocking acquire as a warning: expected here.
logging.getLogger("redis_lock").setLevel(logging.ERROR)

out = threading.Lock()
locks = {}


class Counting:
    """The client a lock object uses, counting the SET NX its acquire sent that were refused
    (the library's own blocking loop, unchanged: only the client is wrapped)."""

    def __init__(self, client):
        self.client = client
        self.refused = 0

    def __getattr__(self, name):
        return getattr(self.client, name)

    def set(self, *args, **kwargs):
        done = self.client.set(*args, **kwargs)
        if not done:
            self.refused += 1
        return done


def say(*words):
    with out:
        sys.stdout.write(" ".join(str(w) for w in words) + "\n")
        sys.stdout.flush()


def outcome(f):
    try:
        f()
        return "ok"
    except Exception as e:  # the exception's name is the answer
        return type(e).__name__


def main():
    r = redis.Redis.from_url(sys.argv[1])
    r.ping()
    say("ready")
    for line in sys.stdin:
        cmd, ident, *args = line.split()
        if cmd == "new":
            kind, name, ttl_ms = args[0], args[1], int(args[2])
            if kind == "redis-py":
                # thread_local=False: a blocking acquire runs in its own thread; a short sleep
                # between its polls keeps the contended test quick.
                lock = redis.lock.Lock(
                    Counting(r), name, timeout=ttl_ms / 1000 if ttl_ms else None, sleep=0.005, thread_local=False
                )
            else:
                # python-redis-lock's expire is whole seconds.
                lock = redis_lock.Lock(r, name, expire=math.ceil(ttl_ms / 1000) if ttl_ms else None)
                # After its check that the client is a StrictRedis.
                lock._client = Counting(r)
            locks[ident] = (kind, name, lock)
            say("new", ident)
        elif cmd == "try":
            say("try", ident, int(bool(locks[ident][2].acquire(blocking=False))))
        elif cmd == "acquire":
            kind, _, lock = locks[ident]
            wait = int(args[0])

            def blocking(ident=ident, kind=kind, lock=lock, wait=wait):
                try:
                    if kind == "redis-py":
                        got = lock.acquire(blocking=True, blocking_timeout=wait)
                    else:
                        got = lock.acquire(blocking=True, timeout=wait)
                    say("acquire", ident, int(bool(got)))
                except Exception as e:
                    say("acquire", ident, type(e).__name__)

            threading.Thread(target=blocking, daemon=True).start()
        elif cmd == "release":
            say("release", ident, outcome(locks[ident][2].release))
        elif cmd == "foreign":
            kind, name, lock = locks[ident]
            token = args[0]
            if kind == "redis-py":
                # What release() sends, with a token that is not the holder's.
                say("foreign", ident, outcome(lambda: lock.do_release(token.encode())))
            else:
                # The documented way to release a lock taken elsewhere.
                say("foreign", ident, outcome(redis_lock.Lock(r, name, id=token).release))
        elif cmd == "count":
            lock, rounds, counter = locks[ident][2], int(args[0]), args[1]

            def count(ident=ident, lock=lock, rounds=rounds, counter=counter):
                try:
                    for _ in range(rounds):
                        if not lock.acquire(blocking=True):
                            raise RuntimeError("acquire returned False")
                        value = int(r.get(counter) or 0)
                        r.set(counter, value + 1)
                        lock.release()
                    client = lock.redis if hasattr(lock, "redis") else lock._client
                    say("count", ident, "done", client.refused)
                except Exception as e:
                    say("count", ident, type(e).__name__)

            threading.Thread(target=count, daemon=True).start()
        elif cmd == "token":
            kind, _, lock = locks[ident]
            value = lock.local.token.decode() if kind == "redis-py" else lock.id
            say("token", ident, value)
        else:
            say("error", ident, "unknown command", cmd)


if __name__ == "__main__":
    main()
