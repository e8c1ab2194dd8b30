"""The Python side of the MySQL named-lock interop tests: a plain PyMySQL client taking
GET_LOCK on its own session, as a Python service next door would, driven over a line protocol.

Usage: python get_lock_peer.py <mysql-url>
Prints:   READY <connection-id>                     once connected
Commands (keys are hex-encoded UTF-8, so any key fits on one line):
          name <hex-key>                 -> NAME <lock name>
          acquire <hex-key> <timeout-s>  -> ACQUIRED | TIMEOUT | ERROR <msg>
          release <hex-key>              -> RELEASED <RELEASE_LOCK answer>
          holder <hex-key>               -> HOLDER <connection id> | HOLDER NONE
          exit
The lock name of a key is computed here, independently of the Rust side, the way .NET's
DistributedLock (MySqlDistributedLock) names an ASCII key, and with no Unicode case table for
any other key (always hashed): what a Python service sharing a lock with lock-mysql's
`?mode=get_lock` would write.
"""
import hashlib
import sys
from urllib.parse import unquote, urlparse

import pymysql

MAX_NAME = 64


def ascii_lower(text):
    return "".join(chr(ord(c) + 32) if "A" <= c <= "Z" else c for c in text)


def utf16_prefix(text, units):
    """The first `units` UTF-16 code units of `text`; a cut pair becomes U+FFFD."""
    out, used = [], 0
    for c in text:
        n = len(c.encode("utf-16-le")) // 2
        if used >= units:
            break
        if used + n > units:
            out.append("\ufffd")
            break
        used += n
        out.append(c)
    return "".join(out)


def lock_name(key):
    """An ASCII key with no upper case and at most 64 characters is its own name; any other key
    is its start (ASCII letters lower-cased, 32 UTF-16 units) and 32 base32 characters of
    SHA-512 (first 160 bits, low bits first). Only ASCII is ever folded: no case table."""
    if key and key.isascii() and key == ascii_lower(key) and len(key) <= MAX_NAME:
        return key
    valid = ascii_lower(key) if key else "__empty__"
    digest = hashlib.sha512(key.encode("utf-8")).digest()
    alphabet = "abcdefghijklmnopqrstuvwxyz234567"
    out, buf, bits, i = [], 0, 0, 0
    for _ in range(32):
        if bits < 5:
            buf |= digest[i] << bits
            i += 1
            bits += 8
        out.append(alphabet[buf & 31])
        buf >>= 5
        bits -= 5
    return utf16_prefix(valid, MAX_NAME - 32) + "".join(out)


def say(line):
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main():
    url = urlparse(sys.argv[1])
    conn = pymysql.connect(
        host=url.hostname,
        port=url.port or 3306,
        user=unquote(url.username or ""),
        password=unquote(url.password or ""),
        database=url.path.lstrip("/") or None,
        charset="utf8mb4",
        autocommit=True,
    )
    cur = conn.cursor()
    cur.execute("SELECT CONNECTION_ID()")
    say("READY %d" % cur.fetchone()[0])
    for line in sys.stdin:
        cmd = line.split()
        if not cmd:
            continue
        try:
            if cmd[0] == "exit":
                break
            name = lock_name(bytes.fromhex(cmd[1]).decode("utf-8"))
            if cmd[0] == "name":
                say("NAME " + name)
            elif cmd[0] == "acquire":
                cur.execute("SELECT GET_LOCK(%s, %s)", (name, float(cmd[2])))
                got = cur.fetchone()[0]
                say("ACQUIRED" if got == 1 else "TIMEOUT" if got == 0 else "ERROR GET_LOCK answered %r" % (got,))
            elif cmd[0] == "release":
                cur.execute("SELECT RELEASE_LOCK(%s)", (name,))
                say("RELEASED %r" % (cur.fetchone()[0],))
            elif cmd[0] == "holder":
                cur.execute("SELECT IS_USED_LOCK(%s)", (name,))
                holder = cur.fetchone()[0]
                say("HOLDER %s" % ("NONE" if holder is None else holder))
            else:
                say("ERROR unknown command " + cmd[0])
        except Exception as e:  # the test reads the error as an answer
            say("ERROR %r" % (e,))
    conn.close()


if __name__ == "__main__":
    main()
