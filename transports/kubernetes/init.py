# The main process (pid 1) of a kennel kernel's pod (transports/kubernetes). The kernel is
# not this process but an exec beside it (or, detached, a process an exec forked); this one
# keeps the pod alive while the kernel runs, and:
#
# - reaps the processes reparented to it (pid 1 of the pod's pid namespace);
# - at SIGTERM (the pod's deletion, with its grace) passes the TERM on to every other
#   process of the namespace (the kernel ends its jobs and exits 143) and exits 0 once they
#   are all gone; the kubelet's SIGKILL at the grace's end ends whatever is left;
# - once it has seen another process and then none for IDLE seconds (argv[1]: the kernel
#   and all it left have ended, as when its controller was killed and its exec stream
#   closed), or none at all for FIRST seconds (argv[2]: a controller killed before its
#   exec), exits 0, so an abandoned pod holds no resources of its node.
import os
import signal
import sys
import time

idle, first = float(sys.argv[1]), float(sys.argv[2])
waited = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGCHLD}
signal.pthread_sigmask(signal.SIG_BLOCK, waited)
me = os.getpid()


def reap():
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if not pid:
            return


def others():
    try:
        return any(n.isdigit() and int(n) != me for n in os.listdir("/proc"))
    except OSError:
        return True


seen = False
since = time.monotonic()
while True:
    info = signal.sigtimedwait(waited, 1.0)
    if info is not None and info.si_signo != signal.SIGCHLD:
        break
    reap()
    if others():
        seen, since = True, time.monotonic()
    elif time.monotonic() - since >= (idle if seen else first):
        os._exit(0)
try:
    os.kill(-1, signal.SIGTERM)
except OSError:
    pass
while others():
    signal.sigtimedwait({signal.SIGCHLD}, 0.05)
    reap()
os._exit(0)
