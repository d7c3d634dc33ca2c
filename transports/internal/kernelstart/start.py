# The start of a kennel kernel that reads its start block from stdin (the wrapped and ssh
# transports). It runs first in the interpreter's -c program, before the program that
# runs the stub, and reads:
#
#   4-byte big-endian length N, then N bytes: fields each ended by a NUL byte:
#   "kennel-start/1"; the working directory; the names of the variables kept from the
#   interpreter's own environment, separated by ","; the run directory to record the
#   kernel's pid in ("" for none); the stub's directory ("" for none); then one
#   "KEY=VALUE" entry per environment variable.
#
# In order: a stub directory must hold the stub (kennel/), else exit 3. A run directory
# is made (0700, new; its parent 0700 as needed) and its file "pid" records the pid, the
# start time (field 22 of /proc/self/stat, "-" without /proc) and the pid namespace
# (/proc/self/ns/pid's link, "-" without it): the kernel leads its process group, so the
# pid names the group its transport signals, the start time tells it from a later process
# given the same pid, and the namespace tells whether a command run later sees that pid.
# The environment is replaced whole:
# os.environ is cleared, the kept variables that were set are put back, then the entries
# in order (a later one of a key wins), so nothing else the wrapper or the login shell
# set is left. It changes to the directory (exit 4 when it cannot) and hands the stub's
# directory to the next program as sys.argv[1]. A block that is short, too large or
# malformed ends the process with exit status 2. Every failure says why on stderr and
# comes before any frame.
def _kennel_start():
    import os
    import sys

    def fail(message, code=2):
        os.write(2, b"kennel start: " + message + b"\n")
        os._exit(code)

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
    # The magic, the four fields, the entries, then b"" after the final NUL.
    fields = read_exactly(size).split(b"\0")
    if len(fields) < 6 or fields.pop() or fields[0] != b"kennel-start/1":
        fail(b"not a kennel-start/1 start block ended by NUL")
    wd, keep, run, stub = fields[1:5]
    entries = []
    for entry in fields[5:]:
        key, sep, value = entry.partition(b"=")
        if not key or not sep:
            fail(b"environment entry is not KEY=VALUE")
        entries.append((key, value))
    if stub and not os.path.isdir(os.path.join(stub, b"kennel")):
        fail(b"no stub in " + stub, 3)
    detached = dict(entries).get(b"KENNEL_KERNEL_RUN")
    pooled = detached and dict(entries).get(b"KENNEL_KERNEL_POOLED") == b"1"
    # The bridge (bridge.py), when the program put it before this one: taken out of the
    # program's globals either way, so nothing after this program sees it.
    bridge = globals().pop("_kennel_bridge", None)
    if pooled and bridge is None:
        fail(b"a pooled kernel is started beside the bridge")
    if detached:
        # A detached kernel (docs/protocol.md, "Protocol 2") outlives this command: the
        # kernel is a child that goes on alone; this process waits for its socket, then
        # exits 0 (3 when the kernel ended first), so the remote command ends while the
        # kernel runs. With the bridge it instead connects to the socket and relays this
        # command's stdin and stdout to it: the kernel's first connection. The token that
        # follows the block on stdin is the child's to read.
        #
        # A pooled kernel (KENNEL_KERNEL_POOLED=1) reads its start block from a pipe of
        # this process instead: once the kernel's socket is bound this process writes
        # POOLED_READY on stdout, reads the start block from stdin (a 4-byte big-endian
        # length, then the token line and the start line) and hands it to the kernel on
        # the pipe, which it then closes; then the bridge connects as above. A stdin that
        # ends first ends this process (status 2), and so the kernel (its pipe ends); a
        # kernel that ends first ends it (status 3).
        if pooled:
            handoff, give = os.pipe()
        child = os.fork()
        if child:
            import time

            sock = os.path.join(detached, b"kernel.sock")
            if pooled:
                os.close(handoff)
            if bridge is not None and not pooled:
                bridge([b"start", detached], child)  # relays, then exits
            deadline = time.monotonic() + 30
            while not os.path.exists(sock):
                if os.waitpid(child, os.WNOHANG)[0]:
                    fail(b"the detached kernel ended before its socket was up", 3)
                if time.monotonic() > deadline:
                    fail(b"no socket from the detached kernel within 30 s", 3)
                time.sleep(0.005)
            if not pooled:
                os._exit(0)
            os.write(1, b"POOLED_READY\n")
            import select

            # Waiting for the block, this process watches the kernel: one that ends
            # first (killed, out of memory) ends it too, so its pool sees the end.
            while not select.select([0], [], [], 0.25)[0]:
                if os.waitpid(child, os.WNOHANG)[0]:
                    fail(b"the pooled kernel ended before its hand-out", 3)
            size = int.from_bytes(read_exactly(4), "big")
            if size > MAX_START_BLOCK:
                fail(b"pooled start block of %d bytes is over the limit" % size)
            block = memoryview(read_exactly(size))
            while block:
                block = block[os.write(give, block):]
            os.close(give)
            bridge([b"start", detached], child)  # relays, then exits
        if pooled:
            os.close(give)
            os.dup2(handoff, 0)
            os.close(handoff)
    if run:
        try:
            os.makedirs(os.path.dirname(run), mode=0o700, exist_ok=True)
            os.mkdir(run, 0o700)
            try:
                with open("/proc/self/stat", "rb") as f:
                    start = f.read().rpartition(b")")[2].split()[19].decode("ascii")
            except (OSError, IndexError):
                start = "-"
            try:
                namespace = os.readlink("/proc/self/ns/pid")
            except OSError:
                namespace = "-"
            with open(os.path.join(run, b"pid"), "w") as f:
                f.write("%d %s %s\n" % (os.getpid(), start, namespace))
        except OSError as exc:
            fail(b"run directory: " + str(exc).encode("utf-8", "replace"))
    kept = [(k, os.environb[k]) for k in keep.split(b",") if k and k in os.environb]
    os.environ.clear()
    for key, value in kept + entries:
        os.environb[key] = value
    try:
        os.chdir(wd)
    except OSError as exc:
        fail(b"working directory %r: %s" % (wd, (exc.strerror or "error").encode("utf-8", "replace")), 4)
    if stub:
        sys.argv[1:] = [os.fsdecode(stub)]


_kennel_start()
del _kennel_start
