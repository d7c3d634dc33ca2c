"""What a detached kernel does as its own subreaper.

A kernel over stdio runs under a reaper that ends everything it started. A detached
kernel has none: it makes itself a child subreaper (prctl PR_SET_CHILD_SUBREAPER), so a
process a cell or job leaves behind (a double-forked daemon, a child in a new session)
is reparented to the kernel, and at its end it SIGKILLs every descendant, with the
process group each leads, until none is left. A controller ending a wedged kernel does
the same from outside (transports/local), stopping the kernel first.
"""

import os
import signal
import time

_PR_SET_CHILD_SUBREAPER = 36


def become_subreaper():
    """Make this process a child subreaper; returns False where it cannot (no ctypes, not
    Linux), and the kernel runs on without the guarantee."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (ImportError, OSError, AttributeError):
        return False


def _parents():
    """{pid: ppid} of every process /proc shows (zombies excluded)."""
    out = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return out
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name, "rb") as f:
                data = f.read()
        except OSError:
            continue
        end = data.rfind(b")")
        fields = data[end + 2 :].split()
        if len(fields) < 2 or fields[0] == b"Z":
            continue
        out[int(name)] = int(fields[1])
    return out


def descendants(root):
    """Pids of the live processes below root."""
    parents = _parents()
    kids = {}
    for pid, ppid in parents.items():
        kids.setdefault(ppid, []).append(pid)
    found, todo = [], list(kids.get(root, ()))
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(kids.get(pid, ()))
    return found


def _reap():
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        except InterruptedError:
            continue
        if pid == 0:
            return


def sweep(timeout=2.0):
    """SIGKILL every descendant of this process (and the group each leads) and reap what
    comes back, until none is left or timeout seconds passed. Only for the kernel's end:
    it reaps any child, so no Popen object may wait after it."""
    me = os.getpid()
    deadline = time.monotonic() + timeout
    while True:
        left = descendants(me)
        if not left:
            break
        for pid in left:
            for target in (-pid, pid):
                try:
                    os.kill(target, signal.SIGKILL)
                except OSError:
                    pass
        _reap()
        if time.monotonic() > deadline:
            break
        time.sleep(0.005)
    _reap()
