"""Throwaway (issue 14 profile): set TCP_NODELAY on every TCP socket of process PID whose
remote port is PORT, by duplicating it with pidfd_getfd (Linux >= 5.6, needs ptrace rights)."""
import ctypes
import os
import socket
import sys

pid, port = int(sys.argv[1]), int(sys.argv[2])
inodes = set()
for line in open(f"/proc/{pid}/net/tcp").read().splitlines()[1:]:
    f = line.split()
    if int(f[2].split(":")[1], 16) == port:
        inodes.add(f[9])
libc = ctypes.CDLL(None, use_errno=True)
pidfd = os.pidfd_open(pid)
done = 0
for fd in os.listdir(f"/proc/{pid}/fd"):
    try:
        target = os.readlink(f"/proc/{pid}/fd/{fd}")
    except OSError:
        continue
    if target.startswith("socket:[") and target[8:-1] in inodes:
        dup = libc.syscall(438, pidfd, int(fd), 0)  # pidfd_getfd
        if dup < 0:
            raise OSError(ctypes.get_errno(), "pidfd_getfd")
        s = socket.socket(fileno=dup)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.close()
        done += 1
print(done)
