# Signals every process of an exec-mode kennel kernel in its container. Run by the docker
# transport as an exec in the kernel's container, as the kernel's user:
# `python -I -S -c PROGRAM RUN SIGNAL` (SIGNAL is TERM or KILL).
#
# A process of the kernel is one whose environment as it was at its exec
# (/proc/<pid>/environ) holds KENNEL_REMOTE_RUN=<RUN>: the kernel carries it from its exec
# (the exec's environment), and everything it starts inherits it. The engine names no pid
# the controller could signal (an exec's pid is the engine host's), so the kernel is found
# in the container by this marker. Each process is signalled through a pidfd opened before
# its environment is read, so a pid given to another process in between is never
# signalled; where no pidfd can be had (Python or Linux too old) the read and the signal
# are a moment apart. It prints how many processes it signalled.
import os
import sys


def _signal():
    import signal

    marker = b"KENNEL_REMOTE_RUN=" + os.fsencode(sys.argv[1])
    sig = {"TERM": signal.SIGTERM, "KILL": signal.SIGKILL}[sys.argv[2]]
    me, n = os.getpid(), 0
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            fd = os.pidfd_open(int(name))
        except (AttributeError, OSError):
            fd = None
        try:
            with open("/proc/%s/environ" % name, "rb") as f:
                if marker not in f.read().split(b"\0"):
                    continue
            if fd is not None and hasattr(signal, "pidfd_send_signal"):
                signal.pidfd_send_signal(fd, sig)
            else:
                os.kill(int(name), sig)
            n += 1
        except OSError:
            pass
        finally:
            if fd is not None:
                os.close(fd)
    sys.stdout.write("%d\n" % n)


_signal()
