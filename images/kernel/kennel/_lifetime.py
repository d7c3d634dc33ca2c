"""The kernel's end: stdin EOF, ``shutdown``, its owner's death, or SIGTERM.

A graceful end (EOF, shutdown, owner death) runs these steps once: fail pending host
requests, start no more cells, end every job's process group (TERM, then KILL after 1 s),
and exit 0 as soon as the main thread is free. A cell that holds the main thread does not
hold the process: it exits ``grace`` seconds after the end began regardless
(KENNEL_KERNEL_EOF_GRACE, default 30).

SIGTERM ends the kernel now, whatever it is doing, a graceful end under way included: the
same steps (those not yet run), no grace for a cell, and exit 143 once the jobs' groups
are gone or KILLed (about 1 s at most). It waits on no frame write and no lock a frame
write may hold, so a host that stopped reading cannot hold it. A cell inside one C call
that keeps the GIL (no bytecode runs) holds it until the call returns; the host's KILL is
the backstop. A step of either end that fails does not stop the end: the exit still comes
(a SIGTERM's end runs on the signal thread, which an error would otherwise kill, losing
every later SIGTERM).

A detached kernel (protocol 2) also ends gracefully when it has stayed unattached past its
grace with no cell or job live (begin), and at once when its run directory disappears
(abandon: jobs TERMed, KILLed 0.5 s later, exit 0 within about a second whatever runs).
Before any exit it gives its link EXIT_SEAL seconds to send what the kernel wrote.
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


# How long a SIGTERM end waits, after KILLing the jobs left, for their job_end frames.
TERM_SETTLE = 0.25
# How long an exit waits for a frame write in progress, so the stream ends whole (and a
# detached kernel's link, to send what was written).
EXIT_SEAL = 0.25
# How long an abandoned kernel (its run directory gone) waits after TERMing its jobs.
ABANDON_GRACE = 0.5


class Lifetime:
    """Runs the kernel's end once, from whichever thread sees it first; a SIGTERM runs
    after (or over) a graceful end already under way."""

    def __init__(self, kernel, grace):
        self._kernel = kernel
        self.grace = grace
        self._lock = threading.Lock()
        self.closing = False
        self._terminating = False
        self._jobs_stopped = threading.Event()
        self._main_free = threading.Event()

    def begin(self, reason, grace=None):
        """End the kernel gracefully (exit 0); returns only if its end already began."""
        with self._lock:
            if self.closing:
                return
            self.closing = True
        if grace is None:
            grace = self.grace
        deadline = time.monotonic() + grace
        try:
            self._refuse_work()
            self._kernel.jobs.stop_all()
        finally:
            # Whatever failed, the end goes on: main_free and the grace still exit.
            self._jobs_stopped.set()
            self._main_free.wait(max(0.0, deadline - time.monotonic()))
            self._exit(0)

    def abandon(self, reason):
        """End the kernel now, whatever end is under way, and exit 0 (143 after a
        SIGTERM): its run directory is gone. No grace for a cell; jobs' groups get TERM,
        then KILL after ABANDON_GRACE seconds. Writes no frame of its own."""
        with self._lock:
            began = self.closing
            self.closing = True
        try:
            if not began:
                self._refuse_work()
            self._kernel.jobs.stop_all(grace=ABANDON_GRACE, settle=TERM_SETTLE, quiet=True)
        finally:
            self._exit(0)

    def terminate(self, reason):
        """End the kernel now (SIGTERM) and exit 143, whatever end is under way; returns
        only if a terminate already runs."""
        with self._lock:
            if self._terminating:
                return
            self._terminating = True
            began = self.closing
            self.closing = True
        try:
            if not began:
                self._refuse_work()
            self._kernel.jobs.stop_all(settle=TERM_SETTLE, quiet=True)
        finally:
            # An error above must not lose the exit: the signal thread that runs this
            # would die with it, and no later SIGTERM would be seen.
            self._exit(143)

    def _refuse_work(self):
        kernel = self._kernel
        try:
            kernel.host.close()
        finally:
            kernel.post(None)

    def main_free(self):
        """Called by the main thread when it has no more cells to run: exits once the jobs
        have been stopped."""
        self._jobs_stopped.wait()
        self._kernel.drain_output("")
        self._main_free.set()
        self._exit(0)

    def _exit(self, code):
        # A graceful exit after a SIGTERM came has stopped the jobs too: it exits 143.
        self._kernel.writer.seal(EXIT_SEAL)
        link = self._kernel.boot.link
        if link is not None:
            try:
                link.finish(EXIT_SEAL)
            except BaseException:
                pass  # the exit comes whatever the link does
            try:
                # A detached kernel is its own subreaper: nothing it started outlives it.
                from kennel import _sweep

                _sweep.sweep()
            except BaseException:
                pass
        os._exit(143 if self._terminating else code)


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
    """Turns SIGTERM into an orderly end: a thread reads Python's signal wakeup fd, the
    pipe _boot made when it began to catch SIGTERM (a TERM since then is in it)."""

    def __init__(self, fd, on_term):
        self._r = fd
        self._on_term = on_term

    def start(self):
        threading.Thread(target=self._loop, name="kennel-signals", daemon=True).start()

    def _loop(self):
        while True:
            try:
                data = os.read(self._r, 64)
            except InterruptedError:
                continue
            if not data:
                return
            if signal.SIGTERM in data:
                self._on_term()
