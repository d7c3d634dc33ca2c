"""Frames the kernel writes: encoding with ``event`` and ``id`` first, and the writer.

Every frame is one line of ASCII JSON (non-ASCII characters escaped, NaN and Infinity
refused), so a frame is valid UTF-8 whatever a cell puts in it. The writer writes each
frame whole under one lock; a KeyboardInterrupt aimed at the main thread is held back
while it writes (see Kernel.critical), so no frame is ever cut.
"""

import json
import os
import threading
import time

get_ident = threading.get_ident

# Limits of docs/protocol.md.
LINE_LIMIT = 32 << 20
PAYLOAD_LIMIT = 16 << 20
# Stream text is cut into frames of at most this many characters (at most 12 bytes each
# once escaped), so a stream frame stays far below LINE_LIMIT. Kept small: a frame's
# buffers (the text joined, escaped, encoded, enveloped) then stay below malloc's mmap
# threshold and are reused, where larger ones are fresh pages each time (page faults cost
# more than the copies themselves; measured: half the stub's time for 512 Ki).
STREAM_CHUNK = 60 << 10  # its frame (ASCII text) also fits the host link's 64 KiB read buffer

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
    # ASCII text (every value is encoded with ensure_ascii): its UTF-8 is the same bytes,
    # and encoding it is one copy, where the ASCII codec checks every character.
    return "".join(parts).encode("utf-8")


def encode_done_ok(frame_id, result):
    """encode("done", frame_id, status ok, result, error null), faster."""
    if type(frame_id) is not str or (result is not None and type(result) is not str):
        return encode("done", frame_id, (("status", "ok"), ("result", result), ("error", None)))
    return (
        '{"event":"done","id":%s,"status":"ok","result":%s,"error":null}\n'
        % (_encode_str(frame_id), "null" if result is None else _encode_str(result))
    ).encode("utf-8")


# The characters encode_basestring_ascii escapes in ASCII text, but the newline, each
# mapped to NUL: ASCII text with no NUL once translated (str.translate's ASCII fast path,
# several times faster than the escaping) needs its newlines escaped and nothing else.
_SPECIAL = str.maketrans({c: "\x00" for c in (*range(0x20), 0x22, 0x5C, 0x7F) if c != 0x0A})


def encode_stream(owner, name, text):
    """encode("stream", owner, name, text), byte for byte, faster: plain text (see
    _SPECIAL) is escaped by one replace, anything else by encode_basestring_ascii."""
    if text.isascii() and "\x00" not in text.translate(_SPECIAL):
        parts = ('{"event":"stream","id":', _encode_value(owner), ',"name":', _encode_value(name),
                 ',"text":"', text.replace("\n", "\\n"), '"}\n')
    else:
        parts = ('{"event":"stream","id":', _encode_value(owner), ',"name":', _encode_value(name),
                 ',"text":', _encode_str(text), "}\n")
    return "".join(parts).encode("utf-8")


def _write_all(fd, data):
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


# Stream text is coalesced: consecutive writes of the same stream of the same owner are
# held and sent as one frame of at most STREAM_CHUNK characters (a write that would take
# the text pending past it sends that first), COALESCE_DELAY seconds after the first,
# before any other frame (a done, a display, a host request: the order of everything an
# owner sends is kept), or at flush.
COALESCE_DELAY = 0.002


class Writer:
    """Writes whole frames to the frame channel, one at a time.

    The channel is the descriptor ``fd`` (stdout over stdio) or, for a detached kernel,
    ``send``: the link's Link.send, which takes a whole frame without ever waiting on a
    socket and never fails. Safe for concurrent use by any thread. Once a write fails
    (the host is gone), every later write is dropped and reports False.

    Stream text (``stream``) is coalesced (see COALESCE_DELAY): the frames on the channel
    carry the same text in the same order as if each write had been its own frame, cut
    at other boundaries.
    """

    def __init__(self, fd, kernel, send=None):
        self._fd = fd
        self._send = send
        self._kernel = kernel
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)  # the flusher waits on it
        self._broken = False
        self._pend = []  # stream text waiting, of (_pend_owner, _pend_name)
        self._pend_size = 0
        self._pend_owner = None
        self._pend_name = None
        self._pend_since = 0.0
        self._flusher = None
        self._flusher_idle = False  # the flusher waits for a batch to start (under the lock)

    def _raw(self, data):
        """Under the lock: put ``data`` on the channel; False once it is broken."""
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

    def _flush_locked(self):
        """Under the lock: send the pending stream text as frames."""
        if not self._pend:
            return not self._broken
        text = "".join(self._pend)
        self._pend = []
        self._pend_size = 0
        owner, name = self._pend_owner, self._pend_name
        if len(text) <= STREAM_CHUNK:
            return self._raw(encode_stream(owner, name, text))
        ok = True
        step = STREAM_CHUNK
        for i in range(0, len(text), step):
            ok = self._raw(encode_stream(owner, name, text[i : i + step])) and ok
        return ok

    def _enter(self):
        kernel = self._kernel
        on_main = threading.get_ident() == kernel.main_ident
        if on_main:
            kernel.critical += 1
        return on_main

    def _leave(self, on_main):
        if on_main:
            kernel = self._kernel
            kernel.critical -= 1
            if not kernel.critical and kernel.pending_interrupt:
                kernel.pending_interrupt = False
                if kernel.current() is not None:
                    raise KeyboardInterrupt

    def write(self, data):
        """Write one encoded frame whole, after the stream text pending; return False when
        the channel is broken."""
        on_main = self._enter()
        try:
            with self._lock:
                self._flush_locked()
                return self._raw(data)
        finally:
            self._leave(on_main)

    def stream(self, owner, name, text):
        """Send ``text`` (a non-empty str) as output ``name`` of ``owner`` (a frame id, ""
        for none), coalesced with the writes before and after it; False when the channel
        is broken.

        The hot path of every print: _enter and _leave are inlined, and a write that
        joins the text pending costs an append."""
        kernel = self._kernel
        on_main = get_ident() == kernel.main_ident
        if on_main:
            kernel.critical += 1
        lock = self._lock
        lock.acquire()
        try:
            pend = self._pend
            if pend:
                if self._pend_owner == owner and self._pend_name == name and not self._broken:
                    size = self._pend_size + len(text)
                    if size <= STREAM_CHUNK:
                        pend.append(text)
                        self._pend_size = size
                        return True
                # Another owner or stream, or a full frame: what is pending goes first.
                self._flush_locked()
            if self._broken:
                return False
            self._pend_owner, self._pend_name = owner, name
            self._pend_since = time.monotonic()
            if self._flusher is None:
                self._flusher = threading.Thread(target=self._flush_loop, name="kennel-flush", daemon=True)
                self._flusher.start()
            elif self._flusher_idle:
                self._cond.notify()
            self._pend.append(text)
            self._pend_size += len(text)
            if self._pend_size >= STREAM_CHUNK:
                return self._flush_locked()
            return True
        finally:
            lock.release()
            if on_main:
                kernel.critical -= 1
                if not kernel.critical and kernel.pending_interrupt:
                    kernel.pending_interrupt = False
                    if kernel.current() is not None:
                        raise KeyboardInterrupt

    def flush(self):
        """Send the pending stream text now."""
        on_main = self._enter()
        try:
            with self._lock:
                return self._flush_locked()
        finally:
            self._leave(on_main)

    def _flush_loop(self):
        # Woken (notify) only from idle: a batch that starts while the flusher waits for
        # an earlier one's due time is found when that wait ends, so steady output costs
        # one wake-up per COALESCE_DELAY at most, not one per frame.
        with self._cond:
            while True:
                while not self._pend:
                    self._flusher_idle = True
                    self._cond.wait()
                self._flusher_idle = False
                due = self._pend_since + COALESCE_DELAY
                now = time.monotonic()
                if now < due:
                    self._cond.wait(due - now)
                    continue
                self._flush_locked()

    def seal(self, timeout):
        """Drop every later write (the process is about to exit). Waits up to ``timeout``
        seconds for a write in progress, so the stream ends on a frame boundary; returns
        False when one was still in progress (its frame may be cut by the exit)."""
        if not self._lock.acquire(timeout=timeout):
            self._broken = True
            return False
        try:
            self._flush_locked()
        finally:
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
