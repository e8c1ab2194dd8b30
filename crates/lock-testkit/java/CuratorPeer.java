// The Java side of the ZooKeeper interop tests: Apache Curator's InterProcessMutex, driven over
// a line protocol (see lock_testkit::interop::curator_peer).
//
// Usage: java CuratorPeer <connect-string> <session-timeout-ms>
// Prints:   READY <negotiated-session-timeout-ms>          once connected
// Commands: acquire <path> <timeout-ms>  -> ACQUIRED <node-path> <czxid> | TIMEOUT | ERROR <msg>
//           release                      -> RELEASED | ERROR <msg>
//           exit                         -> (closes the session and exits)
// Everything runs on the main thread: InterProcessMutex is owned by the thread that acquired it.

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.TimeUnit;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
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

    public static void main(String[] args) throws Exception {
        String connect = args[0];
        int sessionMs = Integer.parseInt(args[1]);
        CuratorFramework client = CuratorFrameworkFactory.builder()
                .connectString(connect)
                .sessionTimeoutMs(sessionMs)
                .connectionTimeoutMs(Math.max(sessionMs, 1000))
                .retryPolicy(new RetryOneTime(50))
                .build();
        client.start();
        if (!client.blockUntilConnected(20, TimeUnit.SECONDS)) {
            System.out.println("ERROR not connected");
            System.exit(2);
        }
        say("READY " + client.getZookeeperClient().getZooKeeper().getSessionTimeout());

        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        Mutex held = null;
        String line;
        while ((line = in.readLine()) != null) {
            String[] cmd = line.trim().split(" ");
            try {
                switch (cmd[0]) {
                    case "acquire": {
                        Mutex m = new Mutex(client, cmd[1]);
                        if (m.acquire(Long.parseLong(cmd[2]), TimeUnit.MILLISECONDS)) {
                            held = m;
                            String node = m.nodePath();
                            Stat stat = client.checkExists().forPath(node);
                            say("ACQUIRED " + node + " " + (stat == null ? -1 : stat.getCzxid()));
                        } else {
                            say("TIMEOUT");
                        }
                        break;
                    }
                    case "release":
                        if (held == null) {
                            say("ERROR not held");
                        } else {
                            held.release();
                            held = null;
                            say("RELEASED");
                        }
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

    private static void say(String line) {
        System.out.println(line);
        System.out.flush();
    }
}
