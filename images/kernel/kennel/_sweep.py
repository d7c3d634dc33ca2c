"""What a detached kernel does as its own subreaper.

A kernel over stdio runs under a reaper that ends everything it started. A detached
kernel has none: it makes itself a child subreaper (prctl PR_SET_CHILD_SUBREAPER), so a
process a cell or job leaves behind (a double-forked daemon, a child in a new session)
is reparented to the kernel, and at its end it SIGKILLs every descendant, with the
process group each leads, until none is left. A controller ending a wedged kernel does
the same from outside (transports/local), stopping the kernel first.

As a subreaper it also gets, during its life, the zombies of orphans nobody waits for:
a thread reaps every zombie child the kernel did not start itself. What it started
itself (through subprocess, os.fork, os.posix_spawn: recorded by wrapping them) is left
to whoever waits for it, so a cell's Popen.wait() still gets its child's status.
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


# Pids the kernel's own process started (subprocess, os.fork, os.posix_spawn*): never
# reaped by the sweeper thread. Entries go once their process is gone.
_own = set()


def _record(pid):
    if pid and pid > 0:
        _own.add(pid)
    return pid


def _wrap_starts():
    import subprocess

    execute = subprocess.Popen._execute_child

    def _execute_child(self, *args, **kwargs):
        try:
            return execute(self, *args, **kwargs)
        finally:
            _record(getattr(self, "pid", None))

    subprocess.Popen._execute_child = _execute_child
    fork = os.fork

    def _fork():
        return _record(fork())

    os.fork = _fork
    for name in ("posix_spawn", "posix_spawnp"):
        spawn = getattr(os, name, None)
        if spawn is not None:
            def _spawn(*args, _spawn=spawn, **kwargs):
                return _record(_spawn(*args, **kwargs))

            setattr(os, name, _spawn)


def _children(me):
    """Pids of this process's children, from /proc/self/task/*/children (cheap), or None
    where the kernel has no such file."""
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return None
    kids = []
    for tid in tasks:
        try:
            with open("/proc/self/task/%s/children" % tid, "rb") as f:
                kids.extend(f.read().split())
        except OSError:
            return None
    return kids


def _zombie_children(me):
    """Pids of this process's children that are zombies."""
    out = []
    names = _children(me)
    if names is None:
        try:
            names = os.listdir("/proc")
        except OSError:
            return out
    for name in names:
        if isinstance(name, bytes):
            name = name.decode("ascii")
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name, "rb") as f:
                data = f.read()
        except OSError:
            continue
        fields = data[data.rfind(b")") + 2 :].split()
        if len(fields) >= 2 and fields[0] == b"Z" and int(fields[1]) == me:
            out.append(int(name))
    return out


def _reap_orphans(interval):
    me = os.getpid()
    while True:
        time.sleep(interval)
        try:
            for pid in list(_own):
                if not os.path.exists("/proc/%d" % pid):
                    _own.discard(pid)
            for pid in _zombie_children(me):
                if pid not in _own:
                    try:
                        os.waitpid(pid, os.WNOHANG)
                    except OSError:
                        pass
        except Exception:
            pass  # the sweeper never stops on an error of one round


def start_reaping(interval=0.25):
    """Record what the kernel starts itself, and reap the zombies of orphans from now on."""
    import threading

    _wrap_starts()
    threading.Thread(target=_reap_orphans, args=(interval,), name="kennel-orphans", daemon=True).start()


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
