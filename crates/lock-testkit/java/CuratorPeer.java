// The Java side of the ZooKeeper interop tests: Apache Curator's InterProcessMutex, the two
// sides of its InterProcessReadWriteLock and InterProcessSemaphoreV2, driven over a line
// protocol (see lock_testkit::interop::curator_peer).
//
// Usage: java CuratorPeer <connect-string> <session-timeout-ms>
// Prints:   READY <negotiated-session-timeout-ms>          once connected
// Commands: acquire <path> <timeout-ms> [mutex|read|write|permit:<n>]
//                                        -> ACQUIRED <node-path> <czxid> <t> | TIMEOUT | ERROR <msg>
//                                           (a permit of InterProcessSemaphoreV2 of <n>: its
//                                           lease node)
//           release                      -> RELEASED <t> | ERROR <msg> (the latest hold first)
//           bench <path> <n> <timeout-ms> -> SAMPLES <us> ... (n timed acquire+release, after 10
//                                           untimed; one InterProcessMutex, as a user keeps one)
//           rwbench <path> <clients> <ms> <write-every>
//                                        -> RWSAMPLES <elapsed-us> <read waits> <write waits>
//                                           (<clients> threads, each with its own client and
//                                           InterProcessReadWriteLock, for <ms>; one operation
//                                           in <write-every> a write; waits in µs, comma-
//                                           separated, "-" for none; ERROR on an overlap)
//           sembench <path> <clients> <permits> <ms>
//                                        -> SEMSAMPLES <elapsed-us> <acquire waits> (the same
//                                           with InterProcessSemaphoreV2 of <permits>)
//           exit                         -> (closes the session and exits)
// <t> is System.nanoTime() (CLOCK_MONOTONIC on Linux, the clock of Rust's Instant) when acquire
// returned / before release was called, so a hand-over can be timed across processes.
// Everything runs on the main thread: InterProcessMutex is owned by the thread that acquired it.

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.TimeUnit;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphoreV2;
import org.apache.curator.framework.recipes.locks.Lease;
import org.apache.curator.retry.RetryOneTime;
import org.apache.zookeeper.data.Stat;

public final class CuratorPeer {
    /** InterProcessMutex keeps the path of its own lock node protected: expose it. */
    static final class Mutex extends InterProcessMutex {
        Mutex(CuratorFramework client, String path) {
            super(client, path);
        }

        String nodePath() {
            return getLockPath();
        }
    }

    /** The write side of InterProcessReadWriteLock, its node path exposed. */
    static final class Write extends InterProcessReadWriteLock.WriteLock {
        Write(CuratorFramework client, String path) {
            super(client, path, null);
        }

        String nodePath() {
            return getLockPath();
        }
    }

    /** The read side of InterProcessReadWriteLock, its node path exposed. */
    static final class Read extends InterProcessReadWriteLock.ReadLock {
        Read(CuratorFramework client, String path) {
            super(client, path, null, new InterProcessReadWriteLock.WriteLock(client, path, null));
        }

        String nodePath() {
            return getLockPath();
        }
    }

    /** One of the three kinds, acquired or not, with the path of its node once held. */
    private static InterProcessMutex lockOf(CuratorFramework client, String path, String kind) {
        switch (kind) {
            case "read":
                return new Read(client, path);
            case "write":
                return new Write(client, path);
            default:
                return new Mutex(client, path);
        }
    }

    private static String nodePath(InterProcessMutex m) {
        if (m instanceof Read) {
            return ((Read) m).nodePath();
        }
        if (m instanceof Write) {
            return ((Write) m).nodePath();
        }
        return ((Mutex) m).nodePath();
    }

    public static void main(String[] args) throws Exception {
        String connect = args[0];
        int sessionMs = Integer.parseInt(args[1]);
        CuratorFramework client = null;
        try {
            client = client(connect, sessionMs);
        } catch (IllegalStateException e) {
            System.out.println("ERROR not connected");
            System.exit(2);
        }
        say("READY " + client.getZookeeperClient().getZooKeeper().getSessionTimeout());

        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        // Several holds at once (readers of one path, permits); release takes the latest.
        java.util.ArrayDeque<AutoCloseable> held = new java.util.ArrayDeque<>();
        String line;
        while ((line = in.readLine()) != null) {
            String[] cmd = line.trim().split(" ");
            try {
                switch (cmd[0]) {
                    case "acquire": {
                        String kind = cmd.length > 3 ? cmd[3] : "mutex";
                        long waitMs = Long.parseLong(cmd[2]);
                        String node = null;
                        if (kind.startsWith("permit:")) {
                            int permits = Integer.parseInt(kind.substring("permit:".length()));
                            Lease lease = new InterProcessSemaphoreV2(client, cmd[1], permits)
                                    .acquire(waitMs, TimeUnit.MILLISECONDS);
                            if (lease != null) {
                                held.push(lease);
                                node = cmd[1] + "/leases/" + lease.getNodeName();
                            }
                        } else {
                            InterProcessMutex m = lockOf(client, cmd[1], kind);
                            if (m.acquire(waitMs, TimeUnit.MILLISECONDS)) {
                                held.push(m::release);
                                node = nodePath(m);
                            }
                        }
                        if (node != null) {
                            long at = System.nanoTime();
                            Stat stat = client.checkExists().forPath(node);
                            say("ACQUIRED " + node + " " + (stat == null ? -1 : stat.getCzxid()) + " " + at);
                        } else {
                            say("TIMEOUT");
                        }
                        break;
                    }
                    case "release":
                        if (held.isEmpty()) {
                            say("ERROR not held");
                        } else {
                            long at = System.nanoTime();
                            held.pop().close();
                            say("RELEASED " + at);
                        }
                        break;
                    case "rwbench":
                        say("RWSAMPLES " + rwBench(connect, sessionMs, cmd[1], Integer.parseInt(cmd[2]),
                                Long.parseLong(cmd[3]), Integer.parseInt(cmd[4])));
                        break;
                    case "sembench":
                        say("SEMSAMPLES " + semBench(connect, sessionMs, cmd[1], Integer.parseInt(cmd[2]),
                                Integer.parseInt(cmd[3]), Long.parseLong(cmd[4])));
                        break;
                    case "bench":
                        say("SAMPLES " + bench(client, cmd[1], Integer.parseInt(cmd[2]), Long.parseLong(cmd[3])));
                        break;
                    case "exit":
                        client.close();
                        System.exit(0);
                        break;
                    default:
                        say("ERROR unknown command " + cmd[0]);
                }
            } catch (Exception e) {
                say("ERROR " + e.toString().replace('\n', ' '));
            }
        }
        client.close();
    }

    /** n acquire+release round trips on a free lock, each timed in µs, after 10 untimed. */
    private static String bench(CuratorFramework client, String path, int n, long waitMs) throws Exception {
        InterProcessMutex m = new InterProcessMutex(client, path);
        StringBuilder out = new StringBuilder();
        for (int i = -10; i < n; i++) {
            long t0 = System.nanoTime();
            if (!m.acquire(waitMs, TimeUnit.MILLISECONDS)) {
                throw new IllegalStateException("bench lock was held");
            }
            m.release();
            long us = (System.nanoTime() - t0) / 1000;
            if (i >= 0) {
                out.append(i == 0 ? "" : " ").append(us);
            }
        }
        return out.toString();
    }

    /** A started client, connected within 20 s; the bench gives each thread one, as the
     *  library's bench gives each of its clients a connection. */
    private static CuratorFramework client(String connect, int sessionMs) throws InterruptedException {
        CuratorFramework c = CuratorFrameworkFactory.builder()
                .connectString(connect)
                .sessionTimeoutMs(sessionMs)
                .connectionTimeoutMs(Math.max(sessionMs, 1000))
                .retryPolicy(new RetryOneTime(50))
                .build();
        c.start();
        if (!c.blockUntilConnected(20, TimeUnit.SECONDS)) {
            throw new IllegalStateException("client not connected");
        }
        return c;
    }

    private static CuratorFramework[] clients(String connect, int sessionMs, int n) throws InterruptedException {
        CuratorFramework[] cs = new CuratorFramework[n];
        for (int i = 0; i < n; i++) {
            cs[i] = client(connect, sessionMs);
        }
        return cs;
    }

    private static void closeAll(CuratorFramework[] cs) {
        for (CuratorFramework c : cs) {
            c.close();
        }
    }

    /** Runs `body(i)` on `n` threads at once; the first failure is thrown. */
    private static long onThreads(int n, java.util.function.IntConsumer body) throws Exception {
        java.util.concurrent.atomic.AtomicReference<Throwable> failed = new java.util.concurrent.atomic.AtomicReference<>();
        Thread[] threads = new Thread[n];
        long t0 = System.nanoTime();
        for (int i = 0; i < n; i++) {
            final int id = i;
            threads[i] = new Thread(() -> {
                try {
                    body.accept(id);
                } catch (Throwable e) {
                    failed.compareAndSet(null, e);
                }
            });
            threads[i].start();
        }
        for (Thread t : threads) {
            t.join();
        }
        if (failed.get() != null) {
            throw new IllegalStateException(failed.get().toString());
        }
        return (System.nanoTime() - t0) / 1000;
    }

    private static String joined(java.util.List<Long> us) {
        if (us.isEmpty()) {
            return "-";
        }
        StringBuilder b = new StringBuilder();
        for (Long v : us) {
            b.append(b.length() == 0 ? "" : ",").append(v);
        }
        return b.toString();
    }

    /** The read-mostly mix of the library's bench on InterProcessReadWriteLock. */
    private static String rwBench(String connect, int sessionMs, String path, int clients, long ms, int writeEvery)
            throws Exception {
        java.util.List<Long> reads = java.util.Collections.synchronizedList(new java.util.ArrayList<>());
        java.util.List<Long> writes = java.util.Collections.synchronizedList(new java.util.ArrayList<>());
        java.util.concurrent.atomic.AtomicInteger readers = new java.util.concurrent.atomic.AtomicInteger();
        java.util.concurrent.atomic.AtomicInteger writers = new java.util.concurrent.atomic.AtomicInteger();
        CuratorFramework[] cs = clients(connect, sessionMs, clients);
        long stop = System.nanoTime() + ms * 1_000_000L;
        long elapsed = onThreads(clients, id -> {
            InterProcessReadWriteLock rw = new InterProcessReadWriteLock(cs[id], path);
            long op = id;
            try {
                while (System.nanoTime() < stop) {
                    op++;
                    boolean write = op % writeEvery == 0;
                    InterProcessMutex m = write ? rw.writeLock() : rw.readLock();
                    long t0 = System.nanoTime();
                    if (!m.acquire(30, TimeUnit.SECONDS)) {
                        throw new IllegalStateException("wait of 30 s ran out");
                    }
                    long waited = (System.nanoTime() - t0) / 1000;
                    boolean overlap;
                    if (write) {
                        overlap = writers.incrementAndGet() > 1 || readers.get() > 0;
                        writers.decrementAndGet();
                        writes.add(waited);
                    } else {
                        readers.incrementAndGet();
                        overlap = writers.get() > 0;
                        readers.decrementAndGet();
                        reads.add(waited);
                    }
                    m.release();
                    if (overlap) {
                        throw new IllegalStateException("exclusion broken");
                    }
                }
            } catch (Exception e) {
                throw new RuntimeException(e);
            }
        });
        closeAll(cs);
        return elapsed + " " + joined(reads) + " " + joined(writes);
    }

    /** The library's semaphore bench on InterProcessSemaphoreV2. */
    private static String semBench(String connect, int sessionMs, String path, int clients, int permits, long ms)
            throws Exception {
        java.util.List<Long> waits = java.util.Collections.synchronizedList(new java.util.ArrayList<>());
        java.util.concurrent.atomic.AtomicInteger inside = new java.util.concurrent.atomic.AtomicInteger();
        CuratorFramework[] cs = clients(connect, sessionMs, clients);
        long stop = System.nanoTime() + ms * 1_000_000L;
        long elapsed = onThreads(clients, id -> {
            InterProcessSemaphoreV2 sem = new InterProcessSemaphoreV2(cs[id], path, permits);
            try {
                while (System.nanoTime() < stop) {
                    long t0 = System.nanoTime();
                    Lease lease = sem.acquire(30, TimeUnit.SECONDS);
                    if (lease == null) {
                        throw new IllegalStateException("wait of 30 s ran out");
                    }
                    waits.add((System.nanoTime() - t0) / 1000);
                    boolean over = inside.incrementAndGet() > permits;
                    inside.decrementAndGet();
                    sem.returnLease(lease);
                    if (over) {
                        throw new IllegalStateException("more holders than permits");
                    }
                }
            } catch (Exception e) {
                throw new RuntimeException(e);
            }
        });
        closeAll(cs);
        return elapsed + " " + joined(waits);
    }

    private static void say(String line) {
        System.out.println(line);
        System.out.flush();
    }
}
