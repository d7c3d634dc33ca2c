"""The detached kernel's side of its link: protocol 2 (docs/protocol.md, "Protocol 2").

A detached kernel serves connections on ``<run>/kernel.sock`` instead of speaking frames
over stdio. The kernel proper reads and writes the attached connection with its own
threads, as it reads stdin and writes stdout over stdio; no thread of this module stands
between them on a round trip:

    kernel proper --Writer--> Link.send: Outbox, then socket (what it takes at once)
                                         `--> the connection's writer thread (the rest)
    socket --Source.pump (the kernel proper's reader)--> Inbox (dedupe) --> dispatch
                                                         `--> ack, at once

The kernel proper's Writer hands each frame to Link.send, which keeps it in the outbox
and writes it to the attached connection under the link's lock, as far as the socket
takes it without waiting (_send_now); what the socket does not take, and the hello and
resend of a new connection, are left to that connection's writer thread, the one thread
that may wait on a socket. So a frame write of the kernel proper never waits on a
socket: a connection that does not read fills the outbox, which drops (see Outbox).
The kernel proper polls Source.fd, an epoll descriptor holding whichever connection is
attached (swapped at each attach), and pumps it from whichever of its threads reads
host frames (the main thread while no cell runs, the reader thread while one does, see
_kernel and _reader): the envelopes are decoded, replays dropped, the frames dispatched
(their decoded value) in order, and the ack sent from that same thread, at once. The
end of a connection or a protocol fault met by a read drops that connection.

Threads of the link itself: one accepts connections; each new connection has a thread
(at most HANDSHAKES handshakes at once; an attach line must come whole within
ATTACH_TIMEOUT) that, for an accepted attach, goes on as the connection's writer. A
watch thread ends the kernel when its run directory disappears or when it has stayed
unattached past its grace with no cell or job live. None of them runs on a round trip:
each thread woken costs a wake-up and a GIL hand-off (tens of microseconds; a thread
wanting the GIL while another runs Python waits up to the switch interval, 5 ms).

The newest accepted attach wins: it closes the connection before it. A refused attach
changes nothing but is logged to kernel.log; so are protocol faults (a line after the
handshake that is not an envelope), which close that connection, and the controller
reattaches.

Decisions the protocol text leaves open, taken here:
- A coalescing push replaces the waiting frame of its key; the replaced frame is
  superseded, not dropped, so it does not count in the hello's ``dropped`` (its seq is
  never sent again, like a dropped one's). Nothing in protocol 1 coalesces.
- An attach whose ack is above every seq the kernel gave is accepted (the outbox is
  emptied) and logged.
- An attach line that does not come whole within ATTACH_TIMEOUT is closed without a
  reply: a ``refused`` would tell the controller the kernel is gone.
- Envelopes are read leniently (any JSON object with exactly those keys, ``frame``
  last, whitespace allowed); the kernel writes the compact form only.
- "At once" is when the kernel proper reads the frame: while a cell runs, its reader
  thread takes over reading after a tick (_kernel's _READER_TICK_MS, 20 ms), so an
  envelope that comes in a cell's first tick is read, applied and acknowledged then
  (host frames over stdio wait the same); the cell's own frames carry the ack sooner.
- Envelopes that come behind the attach line, before the hello, are kept and applied
  once the connection is attached.
"""

import collections
import json
import os
import re
import select
import socket
import threading
import time

try:
    # hmac.compare_digest without importing hmac, which loads OpenSSL (about 4 MiB of
    # resident memory in every idle kernel): the same constant-time C function.
    from _operator import _compare_digest as compare_digest
except ImportError:  # another interpreter
    from hmac import compare_digest

# Bounds of the kernel's outbox (docs/protocol.md, "Outboxes").
MAX_FRAMES = 4096
MAX_BYTES = 64 << 20
# An envelope line, newline included (the protocol's line limit counts the whole line).
LINE_LIMIT = 32 << 20
# The attach line and how long a new connection may take to send it.
ATTACH_LIMIT = 64 << 10
ATTACH_TIMEOUT = 5.0
# New connections whose attach is being read at once; more are closed unanswered.
HANDSHAKES = 16
# How long the kernel may stay unattached before its first attach, in seconds.
FIRST_GRACE = 60.0
# How often the watch checks the run directory and the grace.
WATCH_POLL = 0.25
# seq and ack stay below 2**53, so every JSON reader carries them exactly.
MAX_SEQ = (1 << 53) - 1
# The socket's name inside the run directory.
SOCKET_NAME = "kernel.sock"
LOG_NAME = "kernel.log"
# Frames one send of the writer carries at most (bytes; one larger frame goes alone).
_BATCH = 1 << 20
# One read of a socket or of pipe B, into a buffer kept for it: a buffer allocated per
# read (and shrunk to what came) would make malloc trim its arena, an madvise and a TLB
# shootdown on every frame.
_READ = 1 << 16


class Fault(ValueError):
    """A line the link cannot take: not an envelope, or not an attach. The text says why."""


# Outbox and Inbox: each side's bookkeeping. Not locked: the Link serialises their use.


class Outbox:
    """The kernel's frames not yet acknowledged, numbered from 1 without gaps for the
    kernel's whole life.

    It holds at most ``max_frames`` frames and ``max_bytes`` bytes. When a pushed frame
    does not fit, the oldest coalescing frames go first, then the oldest frames, until
    it fits; each counts in ``dropped`` (taken and reset by the hello). A frame larger
    than ``max_bytes`` is itself dropped (counted) and its seq never sent. A coalescing
    push (``coalesce_key`` not None) replaces the waiting frame of the same key: that one
    is superseded, not dropped, and is not counted.
    """

    def __init__(self, max_frames=MAX_FRAMES, max_bytes=MAX_BYTES):
        self.max_frames = max_frames
        self.max_bytes = max_bytes
        self._frames = collections.OrderedDict()  # seq -> (frame, key), oldest first
        self._keyed = collections.OrderedDict()  # seq -> key of the coalescing ones
        self._by_key = {}  # key -> seq
        self.bytes = 0
        self.last = 0  # the newest seq given
        self.dropped = 0

    def __len__(self):
        return len(self._frames)

    def _fits(self, size):
        return len(self._frames) < self.max_frames and self.bytes + size <= self.max_bytes

    def _remove(self, seq):
        frame, key = self._frames.pop(seq)
        self.bytes -= len(frame)
        if key is not None:
            del self._keyed[seq]
            if self._by_key.get(key) == seq:
                del self._by_key[key]

    def push(self, frame, coalesce_key=None):
        """Keep ``frame`` (bytes, the frame without its newline) under the next seq and
        return that seq."""
        self.last += 1
        seq = self.last
        if coalesce_key is not None:
            old = self._by_key.get(coalesce_key)
            if old is not None:
                self._remove(old)
        size = len(frame)
        if size > self.max_bytes:
            self.dropped += 1
            return seq
        while self._keyed and not self._fits(size):
            self._remove(next(iter(self._keyed)))
            self.dropped += 1
        while not self._fits(size):
            self._remove(next(iter(self._frames)))
            self.dropped += 1
        self._frames[seq] = (frame, coalesce_key)
        if coalesce_key is not None:
            self._keyed[seq] = coalesce_key
            self._by_key[coalesce_key] = seq
        self.bytes += size
        return seq

    def ack(self, n):
        """Drop every frame with seq at or below ``n``: the controller applied them."""
        frames = self._frames
        while frames:
            seq = next(iter(frames))
            if seq > n:
                return
            self._remove(seq)

    def pending(self, after=0):
        """Yield (seq, frame) for every waiting frame with seq above ``after``, in order
        (a snapshot: pushes and acks meanwhile do not change it)."""
        for seq, (frame, _) in list(self._frames.items()):
            if seq > after:
                yield seq, frame

    def batch(self, after, limit=_BATCH):
        """Return ([(seq, frame)], cursor): waiting frames with seq above ``after``, in
        order, about ``limit`` bytes of them (at least one), and the seq up to which the
        outbox has been looked through (gaps of dropped frames included)."""
        frames = self._frames
        out = []
        size = 0
        if not frames:
            return out, max(after, self.last)
        oldest = next(iter(frames))
        if after < oldest - 1:
            after = oldest - 1
        if self.last - after > 2 * len(frames):
            # Many gaps (coalesced or dropped frames): walk the frames, not the seqs.
            for seq, (frame, _) in frames.items():
                if seq <= after:
                    continue
                if out and size + len(frame) > limit:
                    return out, out[-1][0]
                out.append((seq, frame))
                size += len(frame)
            return out, self.last
        seq = after
        while seq < self.last:
            item = frames.get(seq + 1)
            if item is not None:
                if out and size + len(item[0]) > limit:
                    break
                out.append((seq + 1, item[0]))
                size += len(item[0])
            seq += 1
        return out, seq

    def withdraw(self, match):
        """Remove every waiting frame ``match(frame)`` is true for: it is never sent (its
        seq stays a gap, as a dropped frame's; not counted in ``dropped``). Returns how
        many went."""
        seqs = [seq for seq, (frame, _) in self._frames.items() if match(frame)]
        for seq in seqs:
            self._remove(seq)
        return len(seqs)

    def take_dropped(self):
        """Return how many frames were dropped since the last call, and reset the count."""
        n = self.dropped
        self.dropped = 0
        return n


class Inbox:
    """The controller's frames applied: the highest seq. A seq at or below it is a replay."""

    def __init__(self):
        self.last = 0

    def accept(self, seq):
        """True when the frame of ``seq`` is to be applied (it then is the last applied),
        False for a replay to drop."""
        if seq <= self.last:
            return False
        self.last = seq
        return True


_HOST_REQUEST = b'{"event":"host_request","id":'


def _host_request_id(frame):
    """The id of a ``host_request`` frame (bytes as the stub encodes them), else None."""
    if not frame.startswith(_HOST_REQUEST):
        return None
    try:
        value = json.loads(frame)
    except ValueError:
        return None
    return value.get("id") if isinstance(value, dict) else None


# Envelopes.


def encode(seq, ack, frame):
    """The envelope line of ``frame`` (a frame's bytes, its newline optional): the frame
    is copied byte for byte, last."""
    if frame.endswith(b"\n"):
        frame = frame[:-1]
    return b"".join((b'{"seq":%d,"ack":%d,"frame":' % (seq, ack), frame, b"}\n"))


def encode_ack(ack):
    """A bare ack line."""
    return b'{"ack":%d}\n' % ack


def _no_constant(name):
    raise ValueError("%s is not JSON" % name)


_strict = json.JSONDecoder(parse_constant=_no_constant)
_scanstring = json.decoder.scanstring
_WS = " \t\r\n"


def _skip(text, i):
    n = len(text)
    while i < n and text[i] in _WS:
        i += 1
    return i


def _members(text):
    """The members of the JSON object ``text`` as (key, value, start, end), where start
    and end delimit the value's text. Raises Fault for anything but one object."""
    try:
        i = _skip(text, 0)
        if text[i : i + 1] != "{":
            raise Fault("not a JSON object")
        i = _skip(text, i + 1)
        members = []
        if text[i : i + 1] == "}":
            i += 1
        else:
            while True:
                if text[i : i + 1] != '"':
                    raise Fault("not a JSON object: a key expected at %d" % i)
                key, i = _scanstring(text, i + 1, True)
                i = _skip(text, i)
                if text[i : i + 1] != ":":
                    raise Fault("not a JSON object: ':' expected at %d" % i)
                start = _skip(text, i + 1)
                value, i = _strict.raw_decode(text, start)
                members.append((key, value, start, i))
                i = _skip(text, i)
                mark = text[i : i + 1]
                i += 1
                if mark == "}":
                    break
                if mark != ",":
                    raise Fault("not a JSON object: ',' or '}' expected at %d" % (i - 1))
                i = _skip(text, i)
        if _skip(text, i) != len(text):
            raise Fault("data after the object")
        return members
    except (ValueError, RecursionError) as exc:
        if isinstance(exc, Fault):
            raise
        raise Fault("not JSON: %s" % (exc,))


def _seq_int(value):
    return type(value) is int and 0 <= value <= MAX_SEQ


# The compact form the controller writes, read without walking the line in Python: the
# frame (group 3) from the '{' after "frame": to the '}' before the envelope's own.
_COMPACT = re.compile(
    rb'\{"seq":([1-9][0-9]{0,15}),"ack":(0|[1-9][0-9]{0,15}),"frame":(\{.*\})\}\n?\Z', re.S
)
_COMPACT_ACK = re.compile(rb'\{"ack":(0|[1-9][0-9]{0,15})\}\n?\Z')
_scan = _strict.scan_once


def _decode_compact(line):
    """decode's answer for a line in the compact form, or None for any other line (the
    general reading then decides): the same answer, the frame checked as strictly."""
    got = _compact_value(line)
    return None if got is None else got[:3]


def _compact_value(line):
    """_decode_compact's answer and the frame's value: (seq, ack, frame, value)."""
    m = _COMPACT.match(line)
    if m is None:
        m = _COMPACT_ACK.match(line)
        if m is not None and int(m[1]) <= MAX_SEQ:
            return None, int(m[1]), None, None
        return None
    seq, ack, frame = int(m[1]), int(m[2]), m[3]
    if seq > MAX_SEQ or ack > MAX_SEQ:
        return None
    try:
        # One JSON value spanning the whole frame: the object its first '{' opens
        # closes at its last '}'.
        text = frame.decode("utf-8")
        value, end = _scan(text, 0)
    except (ValueError, RecursionError, StopIteration):
        return None
    if end != len(text) or type(value) is not dict:
        return None
    return seq, ack, frame, value


def decode(line):
    """Read one envelope line (its newline optional) and return (seq, ack, frame): frame
    is the inner frame's bytes exactly as in the line (no newline); seq and frame are
    None for a bare ack. Raises Fault for anything else."""
    return read_envelope(line)[:3]


def read_envelope(line):
    """decode's answer and the inner frame's value: (seq, ack, frame, value), value the
    frame decoded (a dict), None for a bare ack. Raises Fault as decode does."""
    if len(line) > LINE_LIMIT:
        raise Fault("a line of %d bytes, over the %d-byte limit" % (len(line), LINE_LIMIT))
    got = _compact_value(line)
    if got is not None:
        return got
    return _any_value(line)


def _decode_any(line):
    """decode for any line, walking its members."""
    return _any_value(line)[:3]


def _any_value(line):
    """_decode_any's answer and the frame's value."""
    data = line[:-1] if line.endswith(b"\n") else line
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise Fault("not UTF-8")
    members = _members(text)
    keys = [m[0] for m in members]
    if keys == ["ack"]:
        ack = members[0][1]
        if not _seq_int(ack):
            raise Fault("ack is not an integer from 0")
        return None, ack, None, None
    if len(keys) != 3 or keys[2] != "frame" or sorted(keys[:2]) != ["ack", "seq"]:
        raise Fault("keys %r are not an envelope's" % (keys[:8],))
    values = {m[0]: m for m in members}
    seq, ack = values["seq"][1], values["ack"][1]
    _, frame, start, end = values["frame"]
    if not _seq_int(seq) or seq == 0:
        raise Fault("seq is not an integer from 1")
    if not _seq_int(ack):
        raise Fault("ack is not an integer from 0")
    if not isinstance(frame, dict):
        raise Fault("the frame is not an object")
    # The frame is the last member: only whitespace and '}' follow it, so its bytes end
    # where that short tail begins; what comes before it is short too.
    first = len(text[:start].encode("utf-8"))
    last = len(data) - len(text[end:].encode("utf-8"))
    return seq, ack, data[first:last], frame


def decode_attach(line):
    """Read an attach line; return (kernel, token, ack, grace, controller, heartbeat) or
    raise Fault. ``controller`` names the controller instance ("" from one that names
    none); ``heartbeat`` is how often, in seconds, it writes (0: it promises nothing)."""
    try:
        value = _strict.decode(line.decode("utf-8"))
    except (ValueError, RecursionError):
        raise Fault("not an attach: not JSON")
    if not isinstance(value, dict) or list(value) != ["attach"]:
        raise Fault("not an attach")
    attach = value["attach"]
    if not isinstance(attach, dict):
        raise Fault("not an attach")
    kernel, token = attach.get("kernel"), attach.get("token")
    ack, grace = attach.get("ack"), attach.get("grace")
    if not isinstance(kernel, str) or not isinstance(token, str):
        raise Fault("attach without kernel or token")
    if not _seq_int(ack):
        raise Fault("attach ack is not an integer from 0")
    if type(grace) not in (int, float) or not 0 <= grace <= 1e9:
        raise Fault("attach grace is not a number of seconds")
    controller = attach.get("controller", "")
    if not isinstance(controller, str) or len(controller) > 128:
        raise Fault("attach controller is not a name")
    heartbeat = attach.get("heartbeat", 0)
    if type(heartbeat) not in (int, float) or not 0 <= heartbeat <= 1e6:
        raise Fault("attach heartbeat is not a number of seconds")
    return kernel, token, ack, float(grace), controller, float(heartbeat)


# Start-up helpers (_boot calls them before any thread runs).


class BootError(Exception):
    """The detached start cannot go on; the text is for the launcher's stderr."""


def open_run_dir(path):
    """Open the run directory ``path``: it must be a directory (not a symlink), mode
    0700, owned by this user. Returns (absolute path, fd, kernel id)."""
    path = os.path.abspath(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise BootError("run directory %s: %s" % (path, exc.strerror or exc))
    info = os.fstat(fd)
    if info.st_uid != os.getuid():
        os.close(fd)
        raise BootError("run directory %s is owned by uid %d, not %d" % (path, info.st_uid, os.getuid()))
    if info.st_mode & 0o7777 != 0o700:
        os.close(fd)
        raise BootError("run directory %s has mode %o, want 700" % (path, info.st_mode & 0o7777))
    return path, fd, os.path.basename(path)


_HEX = frozenset(b"0123456789abcdef")


def read_token(fd):
    """Read the token line (64 lowercase hex digits, then a newline or the end) from fd."""
    data = b""
    while b"\n" not in data and len(data) <= 65:
        try:
            chunk = os.read(fd, 66 - len(data))
        except InterruptedError:
            continue
        except OSError as exc:
            raise BootError("token: cannot read fd %d: %s" % (fd, exc.strerror or exc))
        if not chunk:
            break
        data += chunk
    line = data.split(b"\n", 1)[0]
    if len(line) != 64 or not set(line) <= _HEX:
        raise BootError("token: want one line of 64 lowercase hex digits on fd %d" % fd)
    return line.decode("ascii")


# The most a pooled kernel's start block may hold (token line and start line).
START_LIMIT = 1 << 20


def read_start(fd):
    """Read a pooled kernel's start block from fd, to its end: the token line, then one
    line of JSON, {"dir": absolute path, "env": ["KEY=VALUE", ...]}, the environment the
    kernel runs with (it replaces the whole of os.environ) and its working directory.
    Returns (token, env as a dict, dir). Anything else (over START_LIMIT, a bad token,
    a key or value with a NUL, a key with "=", a relative dir) is a BootError."""
    import json

    chunks = []
    size = 0
    while True:
        try:
            chunk = os.read(fd, 1 << 16)
        except InterruptedError:
            continue
        except OSError as exc:
            raise BootError("start block: cannot read fd %d: %s" % (fd, exc.strerror or exc))
        if not chunk:
            break
        size += len(chunk)
        if size > START_LIMIT:
            raise BootError("start block: over %d bytes" % START_LIMIT)
        chunks.append(chunk)
    data = b"".join(chunks)
    token, _, rest = data.partition(b"\n")
    if len(token) != 64 or not set(token) <= _HEX:
        raise BootError("start block: want a first line of 64 lowercase hex digits")
    try:
        start = json.loads(rest.decode("utf-8"))
    except ValueError as exc:
        raise BootError("start block: its second line is no JSON: %s" % exc)
    if not isinstance(start, dict):
        raise BootError("start block: its second line is no JSON object")
    where, entries = start.get("dir"), start.get("env")
    if not isinstance(where, str) or not where.startswith("/") or "\0" in where:
        raise BootError("start block: dir must be an absolute path")
    if not isinstance(entries, list):
        raise BootError("start block: env must be a list of KEY=VALUE")
    env = {}
    for kv in entries:
        if not isinstance(kv, str) or "\0" in kv:
            raise BootError("start block: env must be a list of KEY=VALUE")
        key, eq, value = kv.partition("=")
        if not key or not eq:
            raise BootError("start block: env entry %r is no KEY=VALUE" % kv[:64])
        env[key] = value
    return token.decode("ascii"), env, where


def listen(run_fd):
    """Bind and listen on kernel.sock in the run directory (bound by its relative name,
    so a deep directory stays under sun_path's limit; mode 0600). The process's working
    directory changes meanwhile: call it before any thread starts. Returns (socket,
    (st_dev, st_ino) of the socket file)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    # O_PATH where there is one: a working directory we may not read is still one to
    # come back to.
    here = os.open(".", getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_CLOEXEC)
    mask = os.umask(0o177)
    try:
        os.fchdir(run_fd)
        try:
            sock.bind(SOCKET_NAME)
        finally:
            os.fchdir(here)
        os.chmod(SOCKET_NAME, 0o600, dir_fd=run_fd)
        info = os.stat(SOCKET_NAME, dir_fd=run_fd, follow_symlinks=False)
        sock.listen(16)
    except OSError:
        sock.close()
        raise
    finally:
        os.umask(mask)
        os.close(here)
    return sock, (info.st_dev, info.st_ino)


def start_time(pid):
    """Field 22 of /proc/<pid>/stat (start time in clock ticks since boot), or 0."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            data = f.read()
        return int(data[data.rfind(b")") + 2 :].split()[19])
    except (OSError, ValueError, IndexError):
        return 0


# The link.


class _Conn:
    """One accepted connection. Fields under the Link's lock, except these: sock is
    read, shut down and closed under conn.lock, and closed (open False) only once closed
    is set and the connection's writer has ended, so neither a read of the kernel
    proper nor a write under the Link's lock can meet a closed (or reused) descriptor;
    inbuf and inscan belong to the kernel proper's readers (one at a time, under the
    kernel's read lock)."""

    __slots__ = (
        "sock", "fd", "epoch", "grace", "closed", "open", "preamble", "sent", "written",
        "ack_sent", "reack", "lock", "busy", "tail", "tail_upto", "inbuf", "inscan",
        "heartbeat", "heard",
    )

    def __init__(self, sock, epoch, grace, ack, heartbeat=0.0):
        self.sock = sock
        self.fd = sock.fileno()
        self.epoch = epoch
        self.grace = grace
        self.closed = False
        self.open = True  # sock is not closed yet
        self.preamble = None  # the hello, sent before any envelope
        self.sent = ack  # the outbox has been sent up to this seq
        self.written = ack  # ... and written to the socket up to this one
        self.ack_sent = -1  # the highest inbound ack sent (the hello's, once it is made)
        self.reack = False  # a replay came: acknowledge again
        self.lock = threading.Lock()  # orders reads and shutdown against close
        self.busy = False  # the writer thread is writing, outside the lock
        self.tail = None  # collected bytes the socket did not take yet: the writer's
        self.tail_upto = 0  # ... and the seq written once they are
        self.inbuf = bytearray()  # a line read in part
        self.inscan = 0  # inbuf has no newline before this
        self.heartbeat = heartbeat  # the controller writes at least this often (0: unknown)
        self.heard = time.monotonic()  # when the kernel last read bytes from it

    def shutdown(self):
        with self.lock:
            if self.open:
                try:
                    self.sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


class _Lines:
    """Splits what a socket reads into lines (the handshake's reading)."""

    def __init__(self, sock):
        self._sock = sock
        self._buf = bytearray()
        self._scan = 0
        self._chunk = bytearray(ATTACH_LIMIT)  # each recv lands here
        self._view = memoryview(self._chunk)

    def rest(self):
        """What was read past the last line returned."""
        return self._buf

    def readline(self, limit, deadline=None):
        """The next line, newline included; b"" at the end (a cut line is dropped).
        Raises Fault past ``limit`` bytes, socket.timeout past ``deadline``."""
        buf = self._buf
        while True:
            end = buf.find(b"\n", self._scan)
            if end >= 0:
                if end + 1 > limit:
                    raise Fault("a line over %d bytes" % limit)
                with memoryview(buf) as view:
                    line = bytes(view[: end + 1])
                del buf[: end + 1]
                self._scan = 0
                return line
            if len(buf) >= limit:
                raise Fault("a line over %d bytes" % limit)
            self._scan = len(buf)
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise socket.timeout("timed out")
                self._sock.settimeout(left)
            n = self._sock.recv_into(self._view)
            if not n:
                return b""
            if not buf and n <= limit and self._chunk.find(b"\n", 0, n) == n - 1:
                return bytes(self._view[:n])  # the common case: exactly one whole line
            buf += self._view[:n]


class _Log:
    """Lines to kernel.log, each cut at 1 KiB, at most 100 in any 10 s (a peer that
    keeps failing its attach cannot fill the disk)."""

    def __init__(self, fd):
        self._fd = fd
        self._lock = threading.Lock()
        self._window = 0.0
        self._count = 0
        self._lost = 0

    def __call__(self, message):
        now = time.monotonic()
        with self._lock:
            if now - self._window >= 10.0:
                if self._lost:
                    self._write("%d link messages suppressed" % self._lost)
                self._window, self._count, self._lost = now, 0, 0
            if self._count >= 100:
                self._lost += 1
                return
            self._count += 1
            self._write(message)

    def _write(self, message):
        if len(message) > 1024:
            message = message[:1024] + "..."
        line = "%s kennel link: %s\n" % (time.strftime("%Y-%m-%dT%H:%M:%S"), message)
        try:
            os.write(self._fd, line.encode("utf-8", "replace"))
        except OSError:
            pass


class Source:
    """The kernel proper's reading of the attached connection: what _reader.Source is
    over stdin, for a detached kernel (Kernel.source).

    ``fd`` is the link's epoll descriptor: it polls readable while the attached
    connection (whichever it is; the link swaps it in at each attach) has something to
    read, so the kernel proper polls one descriptor for its whole life. pump reads what
    the connection holds, drops replays (Inbox), dispatches every other frame (its
    decoded value) in order, and acknowledges at once. A connection's end, a read error
    or a protocol fault drops that connection (the controller reattaches); the kernel's
    input itself never ends, so pump always returns True and ``eof`` stays False.
    """

    def __init__(self, link, dispatch, log):
        self._link = link
        self._dispatch = dispatch
        self._log = log
        self.fd = link._epoll.fileno()
        self.eof = False
        self.reads = 0
        self._chunk = bytearray(_READ)  # each recv lands here
        self._view = memoryview(self._chunk)

    def pump(self, ready=False):
        """Read and dispatch what the attached connection holds now, without waiting.
        The caller holds the kernel's read lock (``ready`` is the stdin source's hint,
        not needed here). Returns True."""
        link = self._link
        if link._woken:
            with link._cond:
                link._woken = False
                _drain(link._wake_r)
        conn = link._conn
        if conn is None:
            return True
        self.reads += 1
        why = None
        if conn.inbuf:
            why = self._lines(conn)  # what the handshake read past the attach
        view = self._view
        while why is None:
            with conn.lock:
                if not conn.open:
                    break
                try:
                    n = conn.sock.recv_into(view, _READ, socket.MSG_DONTWAIT)
                except (BlockingIOError, InterruptedError):
                    break
                except OSError as exc:
                    why = "read failed: %s" % (exc,)
                    break
                if n:
                    conn.heard = time.monotonic()  # under conn.lock: _check_heard reads it there
            if not n:
                why = "end of stream"
                break
            buf = conn.inbuf
            if not buf and self._chunk.find(b"\n", 0, n) == n - 1:
                why = self._one(conn, bytes(view[:n]))  # the common case: one whole line
            else:
                buf += view[:n]
                why = self._lines(conn)
            if n < _READ:
                break
        if why is not None:
            link._drop(conn, why)
            return True
        with link._cond:
            if link._conn is conn:
                link._send_now()  # the acks owed, once for all the lines read
        return True

    def _lines(self, conn):
        """Take every whole line in conn.inbuf; a reason to drop conn, or None."""
        buf = conn.inbuf
        start = 0
        scan = conn.inscan
        why = None
        while True:
            end = buf.find(b"\n", scan)
            if end < 0:
                break
            why = self._one(conn, bytes(buf[start : end + 1]))
            start = scan = end + 1
            if why is not None:
                break
        del buf[:start]
        conn.inscan = len(buf)
        if why is None and len(buf) > LINE_LIMIT:
            why = "protocol fault: a line over %d bytes" % LINE_LIMIT
        return why

    def _one(self, conn, line):
        """Apply one envelope line of conn; a reason to drop conn ("" when a newer
        attach took over), or None."""
        try:
            seq, ack, _, frame = read_envelope(line)
        except Fault as exc:
            return "protocol fault: %s (line begins %r)" % (exc, line[:64])
        link = self._link
        with link._cond:
            if conn.closed:
                return ""  # a newer attach took over: it gets the frame again
            link.outbox.ack(ack)
            if seq is None:
                return None
            if not link.inbox.accept(seq):
                conn.reack = True  # a replay: dropped, acknowledged again
                return None
        try:
            self._dispatch(frame)
        except Exception as exc:  # a frame never stops the reading
            self._log("error", "frame dropped: %s: %s" % (type(exc).__name__, exc))
        return None


class Link:
    """Serves a detached kernel's socket and carries the kernel proper's frames over the
    attached connection.

    Built by _boot (before any thread), started by the kernel (start) once it exists.
    The kernel proper writes its frames with send and reads the controller's through
    source (a Source, polled and pumped by the kernel's own threads).
    """

    def __init__(self, run_path, run_fd, kernel_id, token, sock, sock_id, diag, hello):
        self._run_path = run_path
        self._run_fd = run_fd
        self._run_id = _dir_id(os.fstat(run_fd))
        self._kernel_id = kernel_id
        self._token = token.encode("ascii")
        self._sock = sock
        self._sock_id = sock_id
        self._hello = hello  # pid, pgid, python, bundle
        self.log = _Log(diag)
        self._kernel = None
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)  # the writers wait on it
        self._progress = threading.Condition(self._lock)  # conn.written moved; finish waits
        self.outbox = Outbox()
        self.inbox = Inbox()
        self.epoch = 0
        self._controller = None  # the attached controller's instance name, once one attached
        self._conn = None
        self._detached_at = time.monotonic()
        self._grace = FIRST_GRACE
        self._ending = False
        self._handshakes = threading.BoundedSemaphore(HANDSHAKES)
        # What the kernel proper polls: the attached connection's socket (swapped at
        # each attach, under the lock: _polled) and a wake pipe (_woken, under the lock).
        self._epoll = select.epoll()
        self._polled = None
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._epoll.register(self._wake_r, select.EPOLLIN)
        self._woken = False
        self._flushing = False  # finish waits: _send_now tells it of progress

    def source(self, dispatch, log):
        """The kernel proper's Source: it dispatches each controller frame applied (its
        decoded value) with ``dispatch``; ``log(level, message)`` reports a frame whose
        dispatch failed."""
        return Source(self, dispatch, log)

    def start(self, kernel):
        """Serve: start the accept loop and the watch."""
        self._kernel = kernel
        for target, name in (
            (self._accept, "kennel-link-accept"),
            (self._watch, "kennel-link-watch"),
        ):
            threading.Thread(target=target, name=name, daemon=True).start()

    # Kernel frames out: straight into the outbox and, as far as the socket takes them
    # at once, out to the attached connection.

    def send(self, data):
        """Keep one frame of the kernel proper (its bytes, the newline optional) in the
        outbox and write it to the attached connection now, as far as the socket takes
        it without waiting; the connection's writer thread carries the rest. From any
        thread; never waits on a socket (a full outbox drops, see Outbox)."""
        frame = data[:-1] if data[-1:] == b"\n" else data
        if len(frame) >= LINE_LIMIT - 64:
            self.log("a kernel frame of %d bytes was dropped (the line limit)" % len(frame))
            return
        with self._cond:
            self.outbox.push(frame)
            self._send_now()

    # Writing a connection. What is due on it (the hello, outbox frames past conn.sent,
    # an ack) goes out from whichever thread made it due, straight away, when the
    # socket takes it without waiting and no other write is under way (_send_now); what
    # it does not take is left to the connection's writer thread, which may wait on the
    # socket. A frame write of the kernel proper thus never waits on a socket, and a
    # frame that can go at once costs no hand-off between threads. Bytes reach the
    # socket in the order they were collected: one writer at a time (conn.busy), the
    # writer's tail first.

    def _due(self, conn):
        """Under the lock: whether conn has anything to send."""
        return (
            conn.preamble is not None
            or self.outbox.last > conn.sent
            or self.inbox.last > conn.ack_sent
            or conn.reack
        )

    def _collect(self, conn):
        """Under the lock: the bytes due on conn (hello, frames past conn.sent in order,
        each carrying the inbound ack, or else a bare ack when one is owed) and the seq
        they bring conn.written to once written; moves conn's cursors past them."""
        ack = self.inbox.last
        parts = []
        if conn.preamble is not None:
            parts.append(conn.preamble)  # it carried the ack conn.ack_sent holds
            conn.preamble = None
        frames, conn.sent = self.outbox.batch(conn.sent)
        for seq, frame in frames:
            parts.append(b'{"seq":%d,"ack":%d,"frame":' % (seq, ack))
            parts.append(frame)
            parts.append(b"}\n")
        if not frames and (ack > conn.ack_sent or conn.reack):
            parts.append(encode_ack(ack))
        conn.ack_sent = ack
        conn.reack = False
        return b"".join(parts), conn.sent

    def _send_now(self):
        """Under the lock: write what is due on the attached connection now, without
        waiting on its socket; leave what the socket does not take (or any write while
        another is under way) to the connection's writer thread."""
        conn = self._conn
        if conn is None or conn.closed or not self._due(conn):
            return
        if conn.busy or conn.tail is not None:
            self._cond.notify_all()  # the writer goes on when its write is done
            return
        data, upto = self._collect(conn)
        try:
            n = conn.sock.send(data, socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            n = 0
        except OSError:
            n = 0  # the writer's own write meets the failure and drops the connection
        if n == len(data):
            conn.written = upto
            if self._flushing:
                self._progress.notify_all()  # finish waits for it
            return
        conn.tail = memoryview(data)[n:]
        conn.tail_upto = upto
        self._cond.notify_all()

    def _write_loop(self, conn):
        """The connection's writer: what the socket did not take at once, the hello and
        the resend. Returns why conn failed, or None once it was closed."""
        sock = conn.sock
        while True:
            with self._cond:
                while True:
                    if conn.closed:
                        return None
                    if conn.tail is not None:
                        data, upto = conn.tail, conn.tail_upto
                        conn.tail = None
                        break
                    if self._due(conn):
                        data, upto = self._collect(conn)
                        break
                    # Timed: a wake-up missed by a race costs at most this, never a
                    # frame left waiting in the outbox with nothing more to come.
                    self._cond.wait(0.2)
                conn.busy = True
            try:
                sock.sendall(data)
            except OSError as exc:
                with self._cond:
                    conn.busy = False
                return "write failed: %s" % (exc,)
            with self._cond:
                conn.busy = False
                conn.written = upto
                self._progress.notify_all()

    # Connections.

    def _accept(self):
        while True:
            try:
                sock, _ = self._sock.accept()
            except InterruptedError:
                continue
            except OSError as exc:
                self.log("accept: %s" % (exc,))
                time.sleep(0.1)
                continue
            if not self._handshakes.acquire(blocking=False):
                sock.close()  # too many attaches at once: unanswered, not refused
                continue
            try:
                threading.Thread(
                    target=self._serve, args=(sock,), name="kennel-link-conn", daemon=True
                ).start()
            except RuntimeError:
                self._handshakes.release()
                sock.close()

    def _serve(self, sock):
        """A new connection: its handshake, then (accepted) its writer until it ends."""
        conn = None
        why = None
        try:
            lines = _Lines(sock)
            try:
                conn = self._handshake(sock, lines)
            finally:
                self._handshakes.release()
            if conn is not None:
                why = self._write_loop(conn)
        except BaseException as exc:  # a connection never takes the kernel down
            self.log("connection failed: %r" % (exc,))
            why = "failed"
        finally:
            if conn is not None:
                self._drop(conn, why)
                with conn.lock:
                    conn.open = False
                    sock.close()
            else:
                sock.close()

    def _refuse(self, sock, reason):
        self.log("attach refused: %s" % reason)
        try:
            sock.settimeout(1.0)
            sock.sendall(json.dumps({"refused": reason}).encode("ascii") + b"\n")
        except OSError:
            pass

    def _handshake(self, sock, lines):
        """Read and check the attach; return the accepted connection, now the attached
        one, or None (refused or given up; the caller closes the socket)."""
        deadline = time.monotonic() + ATTACH_TIMEOUT
        try:
            line = lines.readline(ATTACH_LIMIT, deadline)
        except socket.timeout:
            self.log("a connection sent no attach within %gs; closed" % ATTACH_TIMEOUT)
            return None
        except Fault:
            self._refuse(sock, "attach line over %d bytes" % ATTACH_LIMIT)
            return None
        except OSError:
            return None
        if not line:
            return None
        try:
            kernel_id, token, ack, grace, controller, heartbeat = decode_attach(line)
        except Fault as exc:
            self._refuse(sock, str(exc))
            return None
        good_token = compare_digest(token.encode("utf-8", "surrogatepass"), self._token)
        if not good_token:
            self._refuse(sock, "wrong token")
            return None
        if kernel_id != self._kernel_id:
            self._refuse(sock, "wrong kernel id %r" % (kernel_id[:80],))
            return None
        sock.settimeout(None)
        kernel = self._kernel
        cells = kernel.live_cells()
        jobs = [{"id": job_id, "pid": pid, "pgid": pid} for job_id, pid in kernel.jobs.running().items()]
        with self._cond:
            if self._ending:
                refuse = True
            else:
                refuse = False
                self.epoch += 1
                old = self._conn
                conn = _Conn(sock, self.epoch, grace, ack, heartbeat)
                conn.ack_sent = self.inbox.last  # the hello carries it
                rest = lines.rest()
                if rest:
                    # Lines sent before the hello came: the kernel proper's next pump
                    # takes them first (the wake makes it pump).
                    conn.inbuf = rest
                    self._woken = True
                    _poke(self._wake_w)
                if old is not None:
                    old.closed = True
                self._poll(conn)
                self._conn = conn  # the kernel proper's readers see it from now on
                if ack > self.outbox.last:
                    self.log("attach ack %d is above the newest seq %d" % (ack, self.outbox.last))
                self.outbox.ack(ack)
                abandoned = ()
                if self._controller is not None and controller != self._controller:
                    abandoned = self._abandon_host_requests()
                self._controller = controller
                hello = self._hello
                fields = (
                    ("protocol", 2),
                    ("bundle", hello["bundle"]),
                    ("epoch", self.epoch),
                    ("ack", self.inbox.last),
                    ("pid", hello["pid"]),
                    ("pgid", hello["pgid"]),
                    ("leader", hello["leader"]),
                    ("python", hello["python"]),
                    ("cells", cells),
                    ("jobs", jobs),
                    ("dropped", self.outbox.take_dropped()),
                )
                conn.preamble = (
                    json.dumps({"hello": dict(fields)}, separators=(",", ":"), ensure_ascii=True)
                    + "\n"
                ).encode("ascii")
                self._cond.notify_all()
                self._progress.notify_all()
        if refuse:
            self._refuse(sock, "the kernel is ending")
            return None
        if old is not None:
            old.shutdown()
        self.log(
            "attach epoch %d (ack %d, grace %gs)%s"
            % (conn.epoch, ack, grace, " replaces epoch %d" % old.epoch if old is not None else "")
        )
        if abandoned:
            self.log(
                "another controller attached: host requests %s answered unknown"
                % ", ".join(abandoned[:20])
            )
        return conn

    def _abandon_host_requests(self):
        """Under the lock, at the attach of another controller: the one before took the
        pending host requests (or may have: a frame it received is not acknowledged yet)
        and never answers them. Each fails in its cell with code ``unknown``, and its
        frame still in the outbox is withdrawn, so it runs at most once, never again."""
        ids = self._kernel.host.abandon(
            "unknown",
            "the controller that took this host request was replaced before it answered: "
            "it may or may not have run, and it will not run again",
        )
        if ids:
            wanted = set(ids)
            self.outbox.withdraw(lambda frame: _host_request_id(frame) in wanted)
        return ids

    def _poll(self, conn):
        """Under the lock: make conn's socket the one the kernel proper polls (None: no
        socket)."""
        old = self._polled
        if old is conn:
            return
        self._polled = conn
        if old is not None:
            try:
                self._epoll.unregister(old.fd)
            except OSError:
                pass
        if conn is not None:
            self._epoll.register(conn.fd, select.EPOLLIN)

    def _drop(self, conn, why):
        with self._cond:
            first = not conn.closed
            conn.closed = True
            if self._polled is conn:
                self._poll(None)
            if self._conn is conn:
                self._conn = None
                self._detached_at = time.monotonic()
                self._grace = conn.grace
            self._cond.notify_all()
            self._progress.notify_all()
        if first and why:
            self.log("epoch %d closed: %s" % (conn.epoch, why))
        conn.shutdown()

    # Lifetime.

    def _live(self):
        kernel = self._kernel
        return kernel.live_cells() > 0 or bool(kernel.jobs.running())

    def _run_dir_gone(self):
        try:
            if os.fstat(self._run_fd).st_nlink == 0:
                return True
            return _dir_id(os.stat(self._run_path)) != self._run_id
        except FileNotFoundError:
            return True
        except NotADirectoryError:
            return True
        except OSError:
            return False  # cannot tell (a parent's permissions): not gone

    def _watch(self):
        life = self._kernel.life
        while True:
            time.sleep(WATCH_POLL)
            if self._run_dir_gone():
                self.log("run directory %s is gone: ending" % self._run_path)
                life.abandon("run directory gone")
                return
            if self._ending:
                continue  # an end is under way: only the run directory is watched
            self._check_heard()
            with self._cond:
                idle_for = time.monotonic() - self._detached_at
                expired = self._conn is None and idle_for >= self._grace
            if not expired or self._live():
                continue
            with self._cond:
                if self._conn is not None:
                    continue  # attached meanwhile
                self._ending = True
            self.log("unattached for %.1fs (grace %gs), no cell or job live: ending" % (idle_for, self._grace))
            life.begin("unattached past the grace")  # returns only if an end was under way

    def _check_heard(self):
        """Drop the attached connection when its controller promised a heartbeat and
        nothing came for three of them while nothing waits unread on the socket (a
        kernel proper busy in one long call has read nothing, and is not a dead
        connection): a partitioned controller's connection never ends by itself, and the
        grace must start."""
        conn = self._conn
        if conn is None or conn.heartbeat <= 0:
            return
        if time.monotonic() - conn.heard < 3 * conn.heartbeat:
            return
        with conn.lock:
            # Both under the lock the reads take: a read that took the bytes since the
            # first look has moved conn.heard.
            silent = time.monotonic() - conn.heard
            if not conn.open or silent < 3 * conn.heartbeat:
                return
            try:
                readable = bool(select.select([conn.fd], [], [], 0)[0])
            except (OSError, ValueError):
                readable = False
        if readable:
            return
        self._drop(
            conn,
            "nothing heard for %.1fs (heartbeat %gs): taken for a dead connection" % (silent, conn.heartbeat),
        )

    def finish(self, timeout):
        """At exit (the kernel proper's writer sealed): wait up to ``timeout`` seconds for
        the outbox to reach the attached connection's socket; then remove the socket file
        (if it is still this kernel's)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            self._flushing = True
            while True:
                conn = self._conn
                if conn is None or conn.closed or conn.written >= self.outbox.last:
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._progress.wait(left)
        try:
            info = os.stat(SOCKET_NAME, dir_fd=self._run_fd, follow_symlinks=False)
            if (info.st_dev, info.st_ino) == self._sock_id:
                os.unlink(SOCKET_NAME, dir_fd=self._run_fd)
        except OSError:
            pass


def _dir_id(info):
    return info.st_dev, info.st_ino


def _poke(fd):
    try:
        os.write(fd, b"x")
    except OSError:
        pass


def _drain(fd):
    try:
        while os.read(fd, 512):
            pass
    except OSError:
        pass
