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
        data = b""
        while len(data) < n:
            part = os.read(0, n - len(data))
            if not part:
                fail(b"stdin ended %d bytes before the end of the start block" % (n - len(data)))
            data += part
        return data

    size = int.from_bytes(read_exactly(4), "big")
    if size > MAX_START_BLOCK:
        fail(b"start block of %d bytes is over the limit" % size)
    # The magic, the directory, the entries, then b"" after the final NUL.
    fields = read_exactly(size).split(b"\0")
    if len(fields) < 3 or fields.pop() or fields[0] != b"kennel-wrapped/1":
        fail(b"not a kennel-wrapped/1 start block ended by NUL")
    # Checked as it is set: a bad entry ends the process, so nothing runs with a part.
    os.environ.clear()
    for entry in fields[2:]:
        key, sep, value = entry.partition(b"=")
        if not key or not sep:
            fail(b"environment entry is not KEY=VALUE")
        os.environb[key] = value
    try:
        os.chdir(fields[1])
    except OSError as exc:
        fail(b"working directory %r: %s" % (fields[1], (exc.strerror or "error").encode("utf-8", "replace")))


_kennel_wrapped_start()
del _kennel_wrapped_start
