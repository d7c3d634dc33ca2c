"""The memory cap: a sampled guard on the kernel's resident set.

The kernel's footprint is its resident set (``/proc/self/statm``, field 2, in pages). It
is capped at KENNEL_KERNEL_MEMORY_BYTES (default 256 MiB; 0 or less: no cap). While cells
run, a thread samples the footprint every 100 ms and interrupts, with reason ``memory``,
every running cell whose threshold the footprint passed: the cell ends ``interrupted``
with a note naming the largest values the namespace holds and the cap, and the namespace
stays. A cell's threshold is the cap, or, when the kernel was already past the cap as the
cell started (a large value left behind), 8 MiB over the footprint it started at, so
``del big; gc.collect()`` runs instead of being interrupted at once.

It is a sampled guard, not an allocator limit: an allocation larger than the cap
succeeds and is caught by the next sample (or by the sandbox's own limit first: the
container's or cgroup's memory limit stays the hard bound). A cell is interrupted once;
one that catches the KeyboardInterrupt and goes on is not interrupted again. Jobs are
separate processes and are not counted. Where /proc cannot tell (no procfs), there is
no guard.
"""

import os
import sys
import threading
import time

ENV_MEMORY = "KENNEL_KERNEL_MEMORY_BYTES"
DEFAULT_CAP = 256 << 20
# How far over its starting footprint a cell that started past the cap may grow.
SLACK = 8 << 20
# Seconds between samples while cells run.
INTERVAL = 0.1
# Values named in a note, and objects sampled to estimate one container's size.
_NAMED = 3
_SAMPLE = 256

MEMORY = "memory"


def cap_from_env(environ, log):
    """The cap in bytes from the environment; None for no cap. A bad value is logged and
    the default used."""
    text = environ.get(ENV_MEMORY)
    if text is None or text.strip() == "":
        return DEFAULT_CAP
    try:
        value = int(text.strip())
    except ValueError:
        log("warning", "%s=%r is not a number of bytes; using %d" % (ENV_MEMORY, text, DEFAULT_CAP))
        return DEFAULT_CAP
    if value <= 0:
        return None
    return value


class Footprint:
    """Reads the resident set of this process: one descriptor on /proc/self/statm kept
    open, read with pread (about a microsecond)."""

    def __init__(self):
        self._page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
        try:
            self._fd = os.open("/proc/self/statm", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            self._fd = None

    @property
    def available(self):
        return self._fd is not None

    def read(self):
        """Resident bytes now, or None when /proc cannot tell."""
        if self._fd is None:
            return None
        try:
            fields = os.pread(self._fd, 128, 0).split()
            return int(fields[1]) * self._page
        except (OSError, IndexError, ValueError):
            return None


def threshold(cap, start):
    """The footprint past which a cell that started at ``start`` bytes is interrupted."""
    if start is not None and start > cap:
        return start + SLACK
    return cap


class Guard:
    """The memory guard of one kernel. started and ended run on the thread that starts
    and ends a cell; the sampler runs on a thread of its own.

    ``interrupt(cell_id, footprint, cap)`` is the kernel's: it interrupts cell_id with
    reason memory if it still runs, and returns whether it did.

    A cell's starting footprint is the sampler's last sample when it is fresh (the
    sampler runs every INTERVAL while cells start and run, so it is at most that old),
    else one read then: a cell that follows another costs no read of /proc.
    """

    def __init__(self, cap, interrupt, footprint=None):
        self.cap = cap
        self._interrupt = interrupt
        self._footprint = footprint or Footprint()
        # cell id -> threshold in bytes, for the cells running and not yet interrupted.
        # Each change is one dict operation (atomic), so no lock is taken: see _loop for
        # how the sampler's sleep and a start are ordered.
        self._cells = {}
        self._wake = threading.Event()
        self._last = None  # the newest footprint read, and when (monotonic seconds)
        self._last_at = -1.0
        self._active_at = -1.0  # when a cell last started or ended
        self.enabled = cap is not None and self._footprint.available

    def start(self):
        if self.enabled:
            threading.Thread(target=self._loop, name="kennel-memory", daemon=True).start()

    def _read(self, now):
        value = self._footprint.read()
        if value is not None:
            self._last, self._last_at = value, now
        return value

    def started(self, cell_id):
        """A cell starts now: record its threshold from the footprint it starts at."""
        if not self.enabled:
            return
        now = time.monotonic()
        self._active_at = now
        start = self._last if now - self._last_at < 2 * INTERVAL else self._read(now)
        self._cells[cell_id] = threshold(self.cap, start)
        if not self._wake.is_set():
            self._wake.set()

    def ended(self, cell_id):
        if not self.enabled:
            return
        self._active_at = time.monotonic()
        self._cells.pop(cell_id, None)

    def _loop(self):
        wake = self._wake
        cells = self._cells
        while True:
            wake.wait()
            # Sample every INTERVAL while cells run or have just run; sleep until one
            # starts otherwise.
            while True:
                time.sleep(INTERVAL)
                now = time.monotonic()
                if not cells and now - self._active_at >= INTERVAL:
                    wake.clear()
                    # A cell that started before the clear is seen here; one after it
                    # found the event clear and set it again.
                    if not cells:
                        break
                watched = list(cells.items())
                value = self._read(now)
                if value is None:
                    continue
                for cell_id, limit in watched:
                    if value > limit and cells.pop(cell_id, None) is not None:  # told once
                        self._interrupt(cell_id, value, self.cap)


def mib(n):
    return "%.1f MiB" % (n / float(1 << 20))


def note(namespace, footprint, cap):
    """The note of a cell interrupted for memory: the footprint, the cap, and the largest
    values the namespace holds (estimated), which stay."""
    held = largest(namespace)
    text = (
        "interrupted: the kernel's memory (%s resident) passed its cap of %s (%s); "
        "the namespace is kept" % (mib(footprint), mib(cap), ENV_MEMORY)
    )
    if held:
        text += "; it holds " + ", ".join(
            "%s (%s, ~%s)" % (name, kind, mib(size)) for name, kind, size in held
        )
        text += ": del what is not needed (then gc.collect()) to free it"
    return text


def largest(namespace, count=_NAMED):
    """The ``count`` largest values of the namespace by estimated size: (name, type
    name, bytes). Modules, functions, classes and dunder names are left out."""
    try:
        items = list(namespace.items())
    except RuntimeError:
        return []
    sizes = []
    for name, value in items:
        if not isinstance(name, str) or name.startswith("__") or name == "kennel":
            continue
        if isinstance(value, (type(sys), type, type(largest), type(len))):
            continue
        try:
            size = estimate(value)
        except Exception:
            continue
        sizes.append((size, name, type(value).__name__))
    sizes.sort(reverse=True)
    return [(name, kind, size) for size, name, kind in sizes[:count]]


def estimate(value):
    """An estimate of the bytes ``value`` holds: its own size, and for a container the
    mean size of a sample of its items times their number (one level deep)."""
    size = sys.getsizeof(value)
    if isinstance(value, dict):
        n = len(value)
        if n:
            sample = []
            for i, (k, v) in enumerate(value.items()):
                if i >= _SAMPLE:
                    break
                sample.append(sys.getsizeof(k) + sys.getsizeof(v))
            size += sum(sample) * n // len(sample)
    elif isinstance(value, (list, tuple, set, frozenset)):
        n = len(value)
        if n:
            sample = []
            for i, item in enumerate(value):
                if i >= _SAMPLE:
                    break
                sample.append(sys.getsizeof(item))
            size += sum(sample) * n // len(sample)
    return size
