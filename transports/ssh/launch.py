# The launcher of a remote kennel kernel. It runs first in the interpreter's -c program,
# before images' boot program, and reads the start block from stdin:
#
#   4-byte big-endian length N, then N bytes: fields each ended by a NUL byte:
#   "kennel-ssh/1", the bundle hash, the run id, the working directory, then one
#   "KEY=VALUE" entry per environment variable.
#
# The kernel command exported KENNEL_REMOTE_RUN=<id> before it exec'd this process, so
# the kernel's own /proc/<pid>/environ carries the run's marker; the block's run id must
# be the same. It checks that ~/.kennel-remote/<hash>/ is staged, makes the run directory
# ~/.kennel-remote/run/<id>/ (0700, new) and records there, in the file "pid", its pid
# and its start time (field 22 of /proc/self/stat; "-" where there is no /proc): the
# kernel leads its process group, so the pid names the group the transport signals, and
# the start time tells the kernel from a later process given the same pid. It replaces
# the environment (keeping PATH, HOME, USER, LOGNAME, SHELL, LANG and TZ from the login
# shell; then the block's entries; then KENNEL_KERNEL_OWNER=stdin and
# KENNEL_REMOTE_RUN=<id>, which every process the kernel starts inherits), changes to
# the directory and hands the stub's directory to the boot program.
# Failures exit before any frame: 2 a bad block, 3 no staged bundle, 4 no such directory.
def _kennel_ssh_start():
    import os
    import sys

    def fail(message, code=2):
        os.write(2, b"kennel ssh: " + message + b"\n")
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
    block = read_exactly(size)
    if not block.endswith(b"\0"):
        fail(b"start block does not end with NUL")
    fields = block[:-1].split(b"\0")
    if len(fields) < 4 or fields[0] != b"kennel-ssh/1":
        fail(b"not a kennel-ssh/1 start block")
    bundle, run_id, wd = fields[1], fields[2], fields[3]
    if len(bundle) != 64 or bundle.strip(b"0123456789abcdef"):
        fail(b"bad bundle hash")
    if not run_id or len(run_id) > 128 or run_id.startswith(b".") or run_id.strip(
            b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-"):
        fail(b"bad run id")
    if os.environb.get(b"KENNEL_REMOTE_RUN") != run_id:
        fail(b"run id is not the KENNEL_REMOTE_RUN the kernel was started with")
    entries = []
    for entry in fields[4:]:
        key, sep, value = entry.partition(b"=")
        if not key or not sep:
            fail(b"environment entry is not KEY=VALUE")
        entries.append((key, value))
    home = os.environb.get(b"HOME") or os.path.expanduser(b"~")
    base = os.path.join(home, b".kennel-remote")
    stub = os.path.join(base, bundle)
    if not os.path.isdir(os.path.join(stub, b"kennel")):
        fail(b"bundle " + bundle + b" is not staged", 3)
    runs = os.path.join(base, b"run")
    try:
        os.makedirs(runs, mode=0o700, exist_ok=True)
        run = os.path.join(runs, run_id)
        os.mkdir(run, 0o700)
        try:
            with open("/proc/self/stat", "rb") as f:
                start = f.read().rpartition(b")")[2].split()[19].decode("ascii")
        except (OSError, IndexError):
            start = "-"
        with open(os.path.join(run, b"pid"), "w") as f:
            f.write("%d %s\n" % (os.getpid(), start))
    except OSError as exc:
        fail(b"run directory: " + str(exc).encode("utf-8", "replace"))
    keep = {}
    for key in (b"PATH", b"HOME", b"USER", b"LOGNAME", b"SHELL", b"LANG", b"TZ"):
        if key in os.environb:
            keep[key] = os.environb[key]
    os.environ.clear()
    for key, value in keep.items():
        os.environb[key] = value
    for key, value in entries:
        os.environb[key] = value
    os.environb.pop(b"KENNEL_KERNEL_OWNER_PID", None)
    os.environb[b"KENNEL_KERNEL_OWNER"] = b"stdin"
    os.environb[b"KENNEL_REMOTE_RUN"] = run_id
    os.environb[b"KENNEL_KERNEL_BUNDLE"] = bundle
    try:
        os.chdir(wd)
    except OSError as exc:
        fail(b"working directory %r: %s" % (wd, (exc.strerror or "error").encode("utf-8", "replace")), 4)
    sys.argv[:] = ["-c", os.fsdecode(stub)]


_kennel_ssh_start()
del _kennel_ssh_start
