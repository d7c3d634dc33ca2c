# Relays a shell job's two output files to its ssh session (see joboutput.go). Run as
# `python -I -S -c PROGRAM` with KENNEL_REMOTE_RUN exported; stdin holds, one a line:
# the run directory, Keep, "new" or "resume", the stdout file's path, the stderr's (each
# <run directory>/kennel-out-<32 hex>-stdout, -stderr). new makes both (O_EXCL, 0600);
# resume opens regular files, not symlinks. A refusal says why on stdout and exits 2
# (a bad line or file), 4 (a file gone) or 3 (a file not made). One relay reads a pair at
# a time (flock): a resume that finds it held says "busy" and waits. Then "ready AT0 N0
# AT1 N1" (each file's gap, from SEEK_HOLE(0) to the data after it), and each file goes
# raw to stdout or stderr, its gap skipped, followed as it grows (polled, 1 ms backing
# off to 50 ms); past Keep (rounded up to 64 KiB) the whole 64 KiB blocks sent are
# punched (every 4 MiB, and when idle), into one hole with the gap. stdin's "end": send
# each file to its end, punch all of it (its name and size stay, as a record of what the
# job wrote; unlinked where nothing can be punched), exit 0; stdin's EOF: exit at once,
# files kept.
import os


def _relay():
    import errno
    import fcntl
    import re
    import stat
    import threading

    def line():
        b = b""
        while not b.endswith(b"\n"):
            c = os.read(0, 1)
            if not c or len(b) > 4096:
                os._exit(2)
            b += c
        return b[:-1]

    def send(fd, b):
        m = memoryview(b)
        while m:
            m = m[os.write(fd, m):]

    def fail(code, why):
        send(1, b"refused: %s\n" % why.encode("utf-8", "replace"))
        os._exit(code)

    run_dir, keep, mode, out, err = [line() for _ in range(5)]
    if not run_dir.startswith(b"/") or not keep.isdigit() or mode not in (b"new", b"resume"):
        fail(2, "bad input")
    names = [p.rpartition(b"/")[2] for p in (out, err)]
    for p, n, which in zip((out, err), names, (b"stdout", b"stderr")):
        if p != run_dir + b"/" + n or not re.fullmatch(rb"kennel-out-[0-9a-f]{32}-" + which, n):
            fail(2, "%s is not a job output file of %s" % (os.fsdecode(p), os.fsdecode(run_dir)))
    if names[0][:-6] != names[1][:-6]:
        fail(2, "%s and %s are not one pair" % (os.fsdecode(out), os.fsdecode(err)))
    new = mode == b"new"
    try:
        dfd = os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as e:
        fail(3 if new else 4 if e.errno == errno.ENOENT else 2, str(e))
    os.umask(0o077)
    flags = os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC  # RDWR: to punch
    fds = []
    for n in names:
        try:
            fds.append(os.open(n, flags | (os.O_CREAT | os.O_EXCL if new else 0), 0o600, dir_fd=dfd))
        except OSError as e:
            if new:
                for m in names[:len(fds)]:
                    os.unlink(m, dir_fd=dfd)
                fail(3, str(e))
            fail(4 if e.errno == errno.ENOENT else 2, str(e))
        if not stat.S_ISREG(os.fstat(fds[-1]).st_mode):
            fail(2, "%s is not a regular file" % os.fsdecode(n))

    threading.excepthook = lambda _: os._exit(1)  # never a traceback in the job's stderr
    ended = threading.Event()

    def watch():
        seen = b"\n"
        while True:
            b = os.read(0, 512)
            if not b:
                os._exit(0)
            seen = (seen + b)[-8:]
            if b"\nend\n" in seen:
                ended.set()

    threading.Thread(target=watch, daemon=True).start()
    for fd in fds:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            send(1, b"busy\n")
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:
            pass  # no locks here
        if os.fstat(fd).st_nlink == 0:
            fail(4, "the files were removed (their job ended) while another relay held them")

    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        fallocate = getattr(libc, "fallocate64", None) or libc.fallocate
        fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    except Exception:
        fallocate = None
    block, batch = 64 << 10, 4 << 20
    kept = -(-int(keep) // block) * block

    class Stream:
        def __init__(self, fd, to):
            self.fd, self.to, self.pos = fd, to, 0
            size, h = os.fstat(fd).st_size, 0
            try:
                h = os.lseek(fd, 0, os.SEEK_HOLE)
                d = os.lseek(fd, h, os.SEEK_DATA) if h < size else h
            except OSError as e:
                d = size if e.errno == errno.ENXIO else h
            self.gap, self.gap_end = h, d
            # Punched up to; None: never (a hole apart from the gap would cut the stream).
            self.punched = None if not kept or h < d < kept else max(kept, h) if h < d else kept

    streams = [Stream(fd, to) for fd, to in zip(fds, (1, 2))]
    send(1, b"ready %d %d %d %d\n" % tuple(x for s in streams for x in (s.gap, s.gap_end - s.gap)))

    def punch(s, least):
        nonlocal fallocate
        upto = s.pos // block * block
        if fallocate and s.punched is not None and upto - s.punched >= least:
            if fallocate(s.fd, 3, s.punched, upto - s.punched) != 0:  # PUNCH_HOLE|KEEP_SIZE
                fallocate = None
            s.punched = upto

    # Not sendfile: a pipe holds the page cache's pages, which a punch would zero under it.
    buf = memoryview(bytearray(1 << 20))

    delay = 0.001
    while True:
        done, moved = ended.is_set(), False
        for s in streams:
            if s.pos == s.gap < s.gap_end:
                s.pos = s.gap_end
            n = s.gap - s.pos if s.pos < s.gap < s.gap_end else 1 << 20
            k = os.preadv(s.fd, [buf[:min(n, 1 << 20)]], s.pos)
            if k:
                send(s.to, buf[:k])
                s.pos, moved = s.pos + k, True
                punch(s, batch)
        if moved:
            delay = 0.001
        elif done:
            break
        else:
            for s in streams:
                punch(s, block)
            ended.wait(delay)
            delay = min(delay * 2, 0.05)
    # The job ended: give back each file's disk and keep the name, its size still saying
    # how much the job wrote. A reader after this one (its controller died before the end
    # was recorded) finds one hole of the whole file and counts every byte as lost,
    # never as read twice; the names go with the run directory.
    for s, n in zip(streams, names):
        size = os.fstat(s.fd).st_size
        if size and (not fallocate or fallocate(s.fd, 3, 0, -(-size // block) * block) != 0):
            try:
                os.unlink(n, dir_fd=dfd)
            except OSError:
                pass
    os._exit(0)


try:
    _relay()
except BaseException:
    os._exit(1)
