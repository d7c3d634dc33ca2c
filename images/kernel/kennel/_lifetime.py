"""The kernel's end: stdin EOF, ``shutdown``, its owner's death, or SIGTERM.

Every end runs the same steps once: fail pending host requests, start no more cells,
end every job's process group (TERM, then KILL after 1 s), and exit 0 as soon as the main
thread is free. A cell that holds the main thread does not hold the process: it exits
``grace`` seconds after the end began regardless (KENNEL_KERNEL_EOF_GRACE, default 30).
SIGTERM runs the same steps with no grace and exits 143.
"""

import os
import signal
import threading
import time

ENV_GRACE = "KENNEL_KERNEL_EOF_GRACE"
ENV_OWNER = "KENNEL_KERNEL_OWNER"
ENV_OWNER_PID = "KENNEL_KERNEL_OWNER_PID"

DEFAULT_GRACE = 30.0
OWNER_POLL = 0.5


def grace_from_env(environ, log):
    text = environ.get(ENV_GRACE)
    if text is None or text == "":
        return DEFAULT_GRACE
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.0 <= value < 1e9:
        log("warning", "%s=%r is not a number of seconds; using %g" % (ENV_GRACE, text, DEFAULT_GRACE))
        return DEFAULT_GRACE
    return value


class Lifetime:
    """Runs the kernel's end once, from whichever thread sees it first."""

    def __init__(self, kernel, grace):
        self._kernel = kernel
        self.grace = grace
        self._lock = threading.Lock()
        self.closing = False
        self._jobs_stopped = threading.Event()
        self._main_free = threading.Event()

    def begin(self, reason, grace=None, exit_code=0):
        """End the kernel; returns only if another thread already began the end."""
        with self._lock:
            if self.closing:
                return
            self.closing = True
        if grace is None:
            grace = self.grace
        kernel = self._kernel
        deadline = time.monotonic() + grace
        kernel.host.close()
        kernel.post(None)
        kernel.jobs.stop_all()
        self._jobs_stopped.set()
        if exit_code == 0:
            self._main_free.wait(max(0.0, deadline - time.monotonic()))
        os._exit(exit_code)

    def main_free(self):
        """Called by the main thread when it has no more cells to run: exits once the jobs
        have been stopped."""
        self._jobs_stopped.wait()
        self._kernel.drain_output("")
        self._main_free.set()
        os._exit(0)


def _proc_stat(pid):
    """(state, start time) of pid from /proc, or None where /proc cannot tell."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            data = f.read()
    except OSError:
        return None
    end = data.rfind(b")")
    if end < 0:
        return None
    fields = data[end + 2 :].split()
    if len(fields) < 20:
        return None
    return fields[0], fields[19]


class OwnerWatch:
    """Watches the owner pid; calls ``on_death`` once it is gone."""

    def __init__(self, pid, on_death, interval=OWNER_POLL):
        self.pid = pid
        self._on_death = on_death
        self._interval = interval
        self._was_parent = os.getppid() == pid
        stat = _proc_stat(pid)
        self._start = stat[1] if stat else None

    def alive(self):
        if self._was_parent and os.getppid() != self.pid:
            return False
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass
        stat = _proc_stat(self.pid)
        if stat is not None:
            state, start = stat
            if state == b"Z" or (self._start is not None and start != self._start):
                return False
        return True

    def start(self):
        threading.Thread(target=self._loop, name="kennel-owner", daemon=True).start()

    def _loop(self):
        while self.alive():
            time.sleep(self._interval)
        self._on_death("owner pid %d is gone" % self.pid)


def owner_pid(environ):
    """The pid to watch, or None (stdin owner, unset). Raises ValueError for a bad value."""
    if environ.get(ENV_OWNER, "") == "stdin":
        return None
    text = environ.get(ENV_OWNER_PID, "")
    if not text:
        return None
    pid = int(text)
    if pid <= 0:
        raise ValueError("not a pid")
    return pid


class SignalWatch:
    """Turns SIGTERM into an orderly end: a thread reads Python's signal wakeup fd."""

    def __init__(self, on_term):
        self._on_term = on_term
        self._r, w = os.pipe()
        os.set_blocking(w, False)
        signal.set_wakeup_fd(w, warn_on_full_buffer=False)
        signal.signal(signal.SIGTERM, lambda signum, frame: None)

    def start(self):
        threading.Thread(target=self._loop, name="kennel-signals", daemon=True).start()

    def _loop(self):
        while True:
            data = os.read(self._r, 64)
            if not data:
                return
            if signal.SIGTERM in data:
                self._on_term()
