"""Frames the kernel writes: encoding with ``event`` and ``id`` first, and the writer.

Every frame is one line of ASCII JSON (non-ASCII characters escaped, NaN and Infinity
refused), so a frame is valid UTF-8 whatever a cell puts in it. The writer writes each
frame whole under one lock; a KeyboardInterrupt aimed at the main thread is held back
while it writes (see Kernel.critical), so no frame is ever cut.
"""

import json
import os
import threading

# Limits of docs/protocol.md.
LINE_LIMIT = 32 << 20
PAYLOAD_LIMIT = 16 << 20
# Stream text is cut into frames of at most this many characters (at most 12 bytes each
# once escaped), so a stream frame stays far below LINE_LIMIT.
STREAM_CHUNK = 512 << 10

_encode_any = json.JSONEncoder(ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode
_encode_str = json.encoder.encode_basestring_ascii


def _encode_value(value):
    # Strings and null, the most common values, skip the encoder's own dispatch.
    if type(value) is str:
        return _encode_str(value)
    if value is None:
        return "null"
    return _encode_any(value)


_F_SETPIPE_SZ = 1031  # fcntl.F_SETPIPE_SZ (named there only from Python 3.10)


def widen_pipe(fd):
    """Grow the pipe behind fd to 1 MiB (the unprivileged default maximum) so large frames
    and fast job output move in few large writes and reads; best effort (fd may be no pipe)."""
    try:
        import fcntl

        fcntl.fcntl(fd, _F_SETPIPE_SZ, 1 << 20)
    except (OSError, ImportError):
        pass


def encode(event, frame_id, fields=()):
    """Return the frame as bytes: ``event``, ``id``, then ``fields`` ((key, value) pairs).

    Keys are the stub's own constants; values are any strict JSON. Raises TypeError or
    ValueError for a value JSON cannot carry.
    """
    parts = ['{"event":', _encode_value(event), ',"id":', _encode_value(frame_id)]
    for key, value in fields:
        parts.append(',"')
        parts.append(key)
        parts.append('":')
        parts.append(_encode_value(value))
    parts.append("}\n")
    return "".join(parts).encode("ascii")


def encode_done_ok(frame_id, result):
    """encode("done", frame_id, status ok, result, error null), faster."""
    if type(frame_id) is not str or (result is not None and type(result) is not str):
        return encode("done", frame_id, (("status", "ok"), ("result", result), ("error", None)))
    return (
        '{"event":"done","id":%s,"status":"ok","result":%s,"error":null}\n'
        % (_encode_str(frame_id), "null" if result is None else _encode_str(result))
    ).encode("ascii")


def _write_all(fd, data):
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


class Writer:
    """Writes whole frames to the frame channel, one at a time.

    The channel is the descriptor ``fd`` (stdout over stdio) or, for a detached kernel,
    ``send``: the link's Link.send, which takes a whole frame without ever waiting on a
    socket and never fails. Safe for concurrent use by any thread. Once a write fails
    (the host is gone), every later write is dropped and reports False.
    """

    def __init__(self, fd, kernel, send=None):
        self._fd = fd
        self._send = send
        self._kernel = kernel
        self._lock = threading.Lock()
        self._broken = False

    def write(self, data):
        """Write one encoded frame whole; return False when the channel is broken."""
        kernel = self._kernel
        on_main = threading.get_ident() == kernel.main_ident
        if on_main:
            kernel.critical += 1
        try:
            with self._lock:
                if self._broken:
                    return False
                try:
                    if self._send is not None:
                        self._send(data)
                    else:
                        _write_all(self._fd, data)
                except OSError:
                    self._broken = True
                    return False
                return True
        finally:
            if on_main:
                kernel.critical -= 1
                if not kernel.critical and kernel.pending_interrupt:
                    kernel.pending_interrupt = False
                    if kernel.current() is not None:
                        raise KeyboardInterrupt

    def seal(self, timeout):
        """Drop every later write (the process is about to exit). Waits up to ``timeout``
        seconds for a write in progress, so the stream ends on a frame boundary; returns
        False when one was still in progress (its frame may be cut by the exit)."""
        if not self._lock.acquire(timeout=timeout):
            self._broken = True
            return False
        self._broken = True
        self._lock.release()
        return True

    def frame(self, event, frame_id, fields=()):
        """Encode and write a frame; see encode and write."""
        return self.write(encode(event, frame_id, fields))

    def log(self, level, message):
        """Write a ``log`` frame (a diagnostic of the stub); never raises for the text."""
        if len(message) > 4096:
            message = message[:4096] + "... (truncated)"
        try:
            return self.frame("log", "", (("level", level), ("message", message)))
        except (TypeError, ValueError):
            return False
