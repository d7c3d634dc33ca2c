"""Host frames in: one line buffer over stdin, read by whichever thread is free.

The main thread reads and dispatches host frames itself while no cell runs, so a cell
starts without a hand-off between threads, and while a cell on it waits for a host reply.
Once a cell has run for a tick (20 ms) the reader thread reads too (interrupts, replies
to other threads, jobs); a short cell never wakes it. All read under one lock and
dispatch under it too, so frames are dispatched in the order they came, whoever reads.

The descriptor stays blocking (it may be shared, e.g. a terminal): a read happens only
right after poll said it has data, under the lock, so it never blocks.

A detached kernel reads its link's attached connection the same way, through
kennel._link.Source (the same fd, reads, eof and pump), which takes envelopes instead
of lines: the same threads read it, under the same lock.
"""

import os
import select

from kennel import _frames

_READ = 1 << 16


class Source:
    """Splits stdin into lines and hands each complete one to ``dispatch``."""

    def __init__(self, fd, dispatch, log):
        self.fd = fd
        self._dispatch = dispatch
        self._log = log
        self._buf = bytearray()
        self._skipping = False
        self.eof = False
        # Reads so far; lets a reader skip the poll before its first read (see pump).
        self.reads = 0
        self._poller = select.poll()
        self._poller.register(fd, select.POLLIN)

    def pump(self, ready=False):
        """Read what stdin holds now and dispatch every complete line. The caller holds
        the source's lock. ``ready`` says stdin is known to hold data: the caller's poll
        said so after it saw ``reads`` at a value it still has (no read since). Returns
        False once stdin has ended."""
        while not self.eof and (ready or self._poller.poll(0)):
            ready = False
            self.reads += 1
            try:
                data = os.read(self.fd, _READ)
            except InterruptedError:
                continue
            except OSError:
                data = b""
            if not data:
                self.eof = True
                if self._buf and not self._skipping:
                    line = bytes(self._buf)
                    self._buf.clear()
                    self._one(line)
                break
            self._feed(data)
            if len(data) < _READ:
                break
        return not self.eof

    def _feed(self, data):
        buf = self._buf
        if not buf and not self._skipping and data.find(b"\n") == len(data) - 1:
            self._one(data)  # the common case: exactly one whole frame
            return
        buf += data
        start = 0
        while True:
            end = buf.find(b"\n", start)
            if end < 0:
                break
            line = bytes(buf[start : end + 1])
            start = end + 1
            if self._skipping:
                self._skipping = False  # the end of a line that was over the limit
                continue
            self._one(line)
        del buf[:start]
        if len(buf) > _frames.LINE_LIMIT:
            buf.clear()
            if not self._skipping:
                self._skipping = True
                self._log("error", "a host frame over %d bytes was dropped" % _frames.LINE_LIMIT)

    def _one(self, line):
        if len(line) > _frames.LINE_LIMIT:
            self._log("error", "a host frame over %d bytes was dropped" % _frames.LINE_LIMIT)
            return
        try:
            self._dispatch(line)
        except Exception as exc:  # a frame never stops the reading
            self._log("error", "frame dropped: %s: %s" % (type(exc).__name__, exc))
