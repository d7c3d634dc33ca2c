# Signals and sweeps a remote kennel kernel. Run by the ssh transport's fixed control
# command as `python -I -S -c PROGRAM`; its stdin holds the run id and the action, one a
# line:
#
#   TERM, KILL  signal the kernel's process group (its pid, recorded in the run
#               directory); KILL also kills every process marked with the run
#               (KENNEL_REMOTE_RUN=<id> in its environment, read from /proc).
#   CLEANUP     TERM every marked process, wait up to 1 s, KILL the rest, wait up to
#               1 s, and remove the run directory.
#
# It prints the number of marked processes still alive at the end.
import os
import sys


def _control():
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

    def marked():
        out = []
        try:
            names = os.listdir("/proc")
        except OSError:
            return out
        for name in names:
            if not name.isdigit() or int(name) == me:
                continue
            try:
                with open("/proc/%s/environ" % name, "rb") as f:
                    if marker in f.read().split(b"\0"):
                        out.append(int(name))
            except OSError:
                pass
        return out

    def kill_all(pids, sig):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except OSError:
                pass

    def group(sig):
        try:
            with open(os.path.join(run, b"pid"), "rb") as f:
                pid = int(f.read().strip() or b"0")
        except (OSError, ValueError):
            return
        if pid > 1:
            try:
                os.killpg(pid, sig)
            except OSError:
                pass

    def settle(seconds):
        end = time.monotonic() + seconds
        left = marked()
        while left and time.monotonic() < end:
            time.sleep(0.05)
            left = marked()
        return left

    if action == "TERM":
        group(signal.SIGTERM)
        left = marked()
    elif action == "KILL":
        group(signal.SIGKILL)
        kill_all(marked(), signal.SIGKILL)
        left = settle(1)
    elif action == "CLEANUP":
        kill_all(marked(), signal.SIGTERM)
        left = settle(1)
        if left:
            kill_all(left, signal.SIGKILL)
            left = settle(1)
        import shutil
        shutil.rmtree(run, ignore_errors=True)
    else:
        os._exit(2)
    sys.stdout.write("%d\n" % len(left))


_control()
