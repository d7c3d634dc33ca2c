# The prelude of a wrapped kennel kernel. It runs first in the interpreter's -c program,
# before the stub (or its bootstrap), and reads the start block from stdin:
#
#   4-byte big-endian length N, then N bytes: fields each ended by a NUL byte:
#   "kennel-wrapped/1", the working directory (a sandbox path), then one "KEY=VALUE"
#   entry per environment variable.
#
# It replaces the whole environment with those entries (os.environ is cleared first, so
# nothing the wrapper or the interpreter put there is left) and changes to the directory.
# A block that is short, too large or malformed, or a directory it cannot enter, ends the
# process with exit status 2 and a message on stderr, before any frame is written.
def _kennel_wrapped_start():
    import os

    def fail(message):
        os.write(2, b"kennel wrapped: " + message + b"\n")
        os._exit(2)

    def read_exactly(n):
        parts = []
        while n > 0:
            data = os.read(0, min(n, 1 << 20))
            if not data:
                fail(b"stdin ended %d bytes before the end of the start block" % n)
            parts.append(data)
            n -= len(data)
        return b"".join(parts)

    size = int.from_bytes(read_exactly(4), "big")
    if size > MAX_START_BLOCK:
        fail(b"start block of %d bytes is over the limit" % size)
    block = read_exactly(size)
    if not block.endswith(b"\0"):
        fail(b"start block does not end with NUL")
    fields = block[:-1].split(b"\0")
    if len(fields) < 2 or fields[0] != b"kennel-wrapped/1":
        fail(b"not a kennel-wrapped/1 start block")
    entries = []
    for entry in fields[2:]:
        key, sep, value = entry.partition(b"=")
        if not key or not sep:
            fail(b"environment entry is not KEY=VALUE")
        entries.append((key, value))
    os.environ.clear()
    for key, value in entries:
        os.environb[key] = value
    try:
        os.chdir(fields[1])
    except OSError as exc:
        fail(b"working directory %r: %s" % (fields[1], (exc.strerror or "error").encode("utf-8", "replace")))


_kennel_wrapped_start()
del _kennel_wrapped_start
