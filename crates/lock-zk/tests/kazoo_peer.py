"""The Python side of the ZooKeeper interop tests: kazoo's Lock, driven over a line protocol.

Usage: python kazoo_peer.py <connect-string> <session-timeout-ms> [extra-lock-pattern ...]
Prints:   READY <negotiated-session-timeout-ms>          once connected
Commands: acquire <path> <timeout-ms>  -> ACQUIRED <node-path> <czxid> | TIMEOUT | ERROR <msg>
          release                      -> RELEASED | ERROR <msg>
          contenders <path>            -> CONTENDERS <JSON list of Lock.contenders()>
          exit
The extra patterns go to Lock(extra_lock_patterns=...): "-lock-" makes kazoo count Curator's
and lock-zk's nodes (`_c_<uuid>-lock-<seq>`) as contenders.
"""
import json
import sys

from kazoo.client import KazooClient
from kazoo.exceptions import LockTimeout


def say(line):
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main():
    connect, session_ms, patterns = sys.argv[1], int(sys.argv[2]), tuple(sys.argv[3:])
    client = KazooClient(hosts=connect, timeout=session_ms / 1000.0)
    client.start(timeout=20)
    say("READY %d" % client._session_timeout)
    held = None
    for line in sys.stdin:
        cmd = line.split()
        if not cmd:
            continue
        try:
            if cmd[0] == "acquire":
                lock = client.Lock(cmd[1], extra_lock_patterns=patterns)
                try:
                    got = lock.acquire(timeout=int(cmd[2]) / 1000.0)
                except LockTimeout:
                    got = False
                if got:
                    held = lock
                    node = lock.path + "/" + lock.node
                    stat = client.exists(node)
                    say("ACQUIRED %s %d" % (node, stat.czxid if stat else -1))
                else:
                    say("TIMEOUT")
            elif cmd[0] == "release":
                if held is None:
                    say("ERROR not held")
                else:
                    held.release()
                    held = None
                    say("RELEASED")
            elif cmd[0] == "contenders":
                # What kazoo shows as each contender's identifier: its lock node's data.
                contenders = client.Lock(cmd[1], extra_lock_patterns=patterns).contenders()
                say("CONTENDERS " + json.dumps(contenders))
            elif cmd[0] == "exit":
                break
            else:
                say("ERROR unknown command " + cmd[0])
        except Exception as e:  # the test reads the error as an answer
            say("ERROR %r" % (e,))
    client.stop()
    client.close()


if __name__ == "__main__":
    main()
