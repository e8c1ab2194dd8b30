"""kazoo's ReadLock/WriteLock and Semaphore under the library's read-write and semaphore mixes
(lock-bench's `kazoo (zk)` target, run in the test kit's pinned venv).

Usage: python kazoo_bench.py rw  <connect> <session-ms> <path> <clients> <ms> <write-every>
       python kazoo_bench.py sem <connect> <session-ms> <path> <clients> <permits> <ms>
Prints one line, as Curator's peer answers the same mixes:
       RWSAMPLES <elapsed-us> <read waits> <write waits>   or
       SEMSAMPLES <elapsed-us> <acquire waits>
waits in microseconds, comma-separated, "-" for none; ERROR <msg> on an overlap or a failure.
Each client is a thread with its own KazooClient (kazoo's threading handler), as a user runs
several workers.
"""
import sys
import threading
import time

from kazoo.client import KazooClient

WAIT_S = 30


def clients(connect, session_ms, n):
    out = []
    for _ in range(n):
        c = KazooClient(hosts=connect, timeout=session_ms / 1000.0)
        c.start(timeout=20)
        out.append(c)
    return out


def joined(us):
    return ",".join(str(v) for v in us) if us else "-"


def run(cs, body):
    """Runs body(i) on one thread per client at once, then stops the clients; the elapsed µs,
    or the first failure raised."""
    n, failed = len(cs), []

    def guarded(i):
        try:
            body(i)
        except Exception as e:  # the line protocol reports it
            failed.append(e)

    threads = [threading.Thread(target=guarded, args=(i,)) for i in range(n)]
    t0 = time.monotonic_ns()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = (time.monotonic_ns() - t0) // 1000
    for c in cs:
        c.stop()
    if failed:
        raise failed[0]
    return elapsed


def rw(connect, session_ms, path, n, ms, write_every):
    cs = clients(connect, session_ms, n)
    reads, writes, count = [], [], {"r": 0, "w": 0}
    guard = threading.Lock()
    stop = time.monotonic_ns() + ms * 1_000_000

    def body(i):
        op = i
        while time.monotonic_ns() < stop:
            op += 1
            write = op % write_every == 0
            lock = cs[i].WriteLock(path) if write else cs[i].ReadLock(path)
            t0 = time.monotonic_ns()
            if not lock.acquire(timeout=WAIT_S):
                raise RuntimeError("wait of %d s ran out" % WAIT_S)
            waited = (time.monotonic_ns() - t0) // 1000
            mine, other = ("w", "r") if write else ("r", "w")
            with guard:
                count[mine] += 1
            time.sleep(0)  # let another holder, if any, count itself in
            with guard:
                overlap = count["w"] > 1 or count[other] > 0
                count[mine] -= 1
                (writes if write else reads).append(waited)
            lock.release()
            if overlap:
                raise RuntimeError("exclusion broken")

    return "RWSAMPLES %d %s %s" % (run(cs, body), joined(reads), joined(writes))


def sem(connect, session_ms, path, n, permits, ms):
    cs = clients(connect, session_ms, n)
    waits, inside = [], [0]
    guard = threading.Lock()
    stop = time.monotonic_ns() + ms * 1_000_000

    def body(i):
        s = cs[i].Semaphore(path, max_leases=permits)
        while time.monotonic_ns() < stop:
            t0 = time.monotonic_ns()
            if not s.acquire(timeout=WAIT_S):
                raise RuntimeError("wait of %d s ran out" % WAIT_S)
            waited = (time.monotonic_ns() - t0) // 1000
            with guard:
                inside[0] += 1
            time.sleep(0)  # let other holders, if any, count themselves in
            with guard:
                over = inside[0] > permits
                inside[0] -= 1
                waits.append(waited)
            s.release()
            if over:
                raise RuntimeError("more holders than permits")

    return "SEMSAMPLES %d %s" % (run(cs, body), joined(waits))


def main():
    kind, connect, session_ms, path = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    nums = [int(a) for a in sys.argv[5:]]
    try:
        if kind == "rw":
            line = rw(connect, session_ms, path, *nums)
        else:
            line = sem(connect, session_ms, path, *nums)
    except Exception as e:
        line = "ERROR %s" % str(e).replace("\n", " ")
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
