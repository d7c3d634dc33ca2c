# Signals and sweeps a remote kennel kernel. Run by the ssh transport's fixed control
# command as `python -I -S -c PROGRAM`; its stdin holds the run id and the action, one a
# line:
#
#   TERM, KILL  signal the kernel's process group; KILL also kills every process marked
#               with the run (KENNEL_REMOTE_RUN=<id> in its environment, read from /proc:
#               the kernel itself carries it from its exec, and everything it starts
#               inherits it).
#   ALIVE       signal nothing: print 1 when the kernel the run directory records still
#               runs, else 0 (a detached kernel's controller asks it when its socket does
#               not answer: only 0 proves the kernel gone).
#   CLEANUP     TERM the kernel's group and every marked process, wait up to 1 s, KILL
#               what is left the same way, wait up to 2 s, and remove the run directory.
#               It ends a kernel that still runs (its connection was lost) as well as
#               what an ended one left behind.
#
# The group is signalled only while its leader is the kernel the run directory records:
# the process under the recorded pid must have the recorded start time (field 22 of its
# /proc/<pid>/stat), checked with a pidfd held across the signal, so a pid the system
# gave to a later process is never signalled. A marked process is signalled through a
# pidfd opened before its environment is read. Where a pidfd cannot be had (Python or
# Linux too old) the check and the signal are a moment apart.
#
# It prints the number of processes of the run (the kernel, marked ones) still alive at
# the end.
import os
import sys


def _control():
    import errno
    import signal
    import time

    lines = sys.stdin.buffer.read(512).split(b"\n")
    if len(lines) < 2:
        os._exit(2)
    run_id, action = lines[0], lines[1].decode("ascii", "replace")
    if not run_id or run_id.startswith(b".") or run_id.strip(
            b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-"):
        os._exit(2)
    run = os.path.join(os.path.expanduser(b"~"), b".kennel-remote", b"run", run_id)
    marker = b"KENNEL_REMOTE_RUN=" + run_id
    me = os.getpid()

    gone = -1

    def pidfd(pid):
        # A pidfd pins pid: it is not given to another process while the fd is open.
        # None: no pidfd to be had here; gone: no such process.
        try:
            return os.pidfd_open(pid)
        except AttributeError:
            return None
        except OSError as exc:
            return gone if exc.errno == errno.ESRCH else None

    def release(fd):
        if fd is not None and fd >= 0:
            os.close(fd)

    def send(fd, pid, sig):
        try:
            if fd is not None and hasattr(signal, "pidfd_send_signal"):
                signal.pidfd_send_signal(fd, sig)
            else:
                os.kill(pid, sig)
        except OSError:
            pass

    def stat(pid):
        # (state, start time) from /proc/<pid>/stat, or None.
        try:
            with open("/proc/%d/stat" % pid, "rb") as f:
                fields = f.read().rpartition(b")")[2].split()
            return fields[0], fields[19]
        except (OSError, IndexError):
            return None

    def recorded():
        # The kernel's pid and start time as the start program recorded them (start b"-": none).
        try:
            with open(os.path.join(run, b"pid"), "rb") as f:
                parts = f.read().split()
            pid = int(parts[0])
        except (OSError, ValueError, IndexError):
            return None
        if pid <= 1:
            return None
        return pid, (parts[1] if len(parts) > 1 else b"-")

    def kernel_alive():
        rec = recorded()
        if rec is None:
            return False
        st = stat(rec[0])
        return st is not None and st[0] != b"Z" and (rec[1] == b"-" or st[1] == rec[1])

    def group(sig):
        rec = recorded()
        if rec is None:
            return
        pid, start = rec
        fd = pidfd(pid)
        if fd == gone:
            return
        try:
            st = stat(pid)
            if st is None or (start != b"-" and st[1] != start):
                return  # gone, or its pid now names another process
            try:
                os.killpg(pid, sig)
            except OSError:
                pass
        finally:
            release(fd)

    def is_marked(pid):
        try:
            with open("/proc/%d/environ" % pid, "rb") as f:
                return marker in f.read().split(b"\0")
        except OSError:
            return False

    def marked():
        try:
            names = os.listdir("/proc")
        except OSError:
            return []
        return [int(n) for n in names if n.isdigit() and int(n) != me and is_marked(int(n))]

    def kill_marked(sig):
        for pid in marked():
            fd = pidfd(pid)
            if fd == gone:
                continue
            try:
                if fd is None or is_marked(pid):
                    send(fd, pid, sig)
            finally:
                release(fd)

    def left():
        return len(marked()) + (1 if kernel_alive() and not is_marked(recorded()[0]) else 0)

    def settle(seconds):
        end = time.monotonic() + seconds
        n = left()
        while n and time.monotonic() < end:
            time.sleep(0.05)
            n = left()
        return n

    if action == "ALIVE":
        sys.stdout.write("%d\n" % (1 if kernel_alive() else 0))
        return
    if action == "TERM":
        group(signal.SIGTERM)
        n = left()
    elif action == "KILL":
        group(signal.SIGKILL)
        kill_marked(signal.SIGKILL)
        n = settle(1)
    elif action == "CLEANUP":
        group(signal.SIGTERM)
        kill_marked(signal.SIGTERM)
        n = settle(1)
        if n:
            group(signal.SIGKILL)
            kill_marked(signal.SIGKILL)
            n = settle(2)
        import shutil
        shutil.rmtree(run, ignore_errors=True)
    else:
        os._exit(2)
    sys.stdout.write("%d\n" % n)


_control()
