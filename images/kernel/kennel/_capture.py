"""Output capture: fds 1 and 2 read from pipes, sys.stdout and sys.stderr as frames.

File descriptors 1 and 2 point at pipes (set up in _boot) that a thread each reads and
forwards as ``stream`` frames, so output from C code and child processes never touches
the frame channel. Output read while a cell runs, or before its end has been drained, is
that cell's (Kernel.output_owner); at the end of a cell the kernel drains both pipes
under the cell's id before writing its ``done``, so all a cell and its children wrote
before it ended comes before its ``done`` and under its id.

sys.stdout and sys.stderr are replaced by writers whose writes go out as stream frames of
the running cell, coalesced (_frames.Writer.stream: within 2 ms, before the cell's next
other frame and its done, or at flush()).
"""

import codecs
import contextvars
import io
import os
import select
import threading


_READ = 1 << 16
_PUMP_MAX = 1 << 20
# A drain stops after this many full reads, so a child that keeps writing cannot hold
# a cell's end forever; the rest goes out as it comes.
_DRAIN_ROUNDS = 16

# The id whose output what this thread or task writes to sys.stdout and sys.stderr is
# (a @remote call's), or None: the running cell's.
owner = contextvars.ContextVar("kennel_owner", default=None)


class Pipe:
    """One captured descriptor's read end: a thread forwards what arrives."""

    def __init__(self, kernel, fd, name):
        self._kernel = kernel
        self._fd = fd
        self.name = name
        self._lock = threading.Lock()
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        os.set_blocking(fd, False)

    def start(self):
        thread = threading.Thread(target=self._loop, name="kennel-" + self.name, daemon=True)
        thread.start()

    def _loop(self):
        poller = select.poll()
        poller.register(self._fd, select.POLLIN)
        while True:
            poller.poll()
            with self._lock:
                if not self._pump(None):
                    return

    def _pump(self, owner):
        """Read what the pipe holds now and forward it; False at end of file."""
        chunks = []
        size = 0
        alive = True
        while size < _PUMP_MAX:
            try:
                data = os.read(self._fd, _READ)
            except BlockingIOError:
                break
            except InterruptedError:
                continue
            if not data:
                alive = False
                break
            chunks.append(data)
            size += len(data)
        if chunks:
            text = self._decoder.decode(b"".join(chunks))
            if text:
                if owner is None:
                    owner = self._kernel.output_owner
                self._kernel.emit_stream(self.name, text, owner)
        return alive

    def drain(self, owner):
        """Forward everything the pipe holds now as output of cell ``owner``."""
        with self._lock:
            for _ in range(_DRAIN_ROUNDS):
                if not self._pump(owner) or not self._pending():
                    return

    def _pending(self):
        poller = select.poll()
        poller.register(self._fd, select.POLLIN)
        return bool(poller.poll(0))


class Drainer:
    """Drains the captured pipes at the end of a cell: one poll when they are empty.

    Used by the main thread only.
    """

    def __init__(self, pipes):
        self._pipes = {pipe._fd: pipe for pipe in pipes}
        self._locks = [pipe._lock for pipe in pipes]
        self._poller = select.poll()
        for fd in self._pipes:
            self._poller.register(fd, select.POLLIN)

    def drain(self, owner):
        ready = self._poller.poll(0)
        if not ready:
            # A reader thread may be forwarding what it read: wait until it is out.
            for lock in self._locks:
                lock.acquire()
                lock.release()
            return
        ready = {fd for fd, _ in ready}
        for fd, pipe in self._pipes.items():
            if fd in ready:
                pipe.drain(owner)
            else:
                with pipe._lock:
                    pass


class StreamWriter(io.TextIOBase):
    """sys.stdout or sys.stderr of a kernel: each write is one or more stream frames."""

    encoding = "utf-8"
    errors = "strict"

    def __init__(self, kernel, name, fd):
        super().__init__()
        self._kernel = kernel
        self._name = name
        self._fd = fd
        self.buffer = _ByteWriter(self)

    @property
    def name(self):
        return "<%s>" % self._name

    def writable(self):
        return True

    def isatty(self):
        return False

    def fileno(self):
        return self._fd

    def flush(self):
        self._kernel.writer.flush()

    def write(self, text):
        if type(text) is not str and not isinstance(text, str):
            raise TypeError("write() argument must be str, not %s" % type(text).__name__)
        if text:
            kernel = self._kernel
            # Kernel.emit_stream, inlined: this is every print's path.
            kernel.writer.stream(owner.get() or kernel.running or "", self._name, text)
        return len(text)


class _ByteWriter(io.RawIOBase):
    """sys.stdout.buffer: bytes written are decoded as UTF-8 and sent as text."""

    def __init__(self, stream):
        super().__init__()
        self._stream = stream
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._lock = threading.Lock()

    def writable(self):
        return True

    def fileno(self):
        return self._stream.fileno()

    def write(self, data):
        data = bytes(data)
        with self._lock:
            text = self._decoder.decode(data)
        if text:
            self._stream.write(text)
        return len(data)
