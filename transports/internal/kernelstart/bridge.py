# The bridge of a detached kennel kernel (docs/protocol.md, "Protocol 2") for a transport
# that can only run commands in the kernel's sandbox (the wrapped transport, Docker exec
# mode): a small program beside the kernel that carries one connection to the kernel's
# socket over its own stdin and stdout. Run as `python -I -S -c PROGRAM ACTION ARG...`:
#
#   attach RUN                      connect to RUN/kernel.sock and relay
#   signal RUN PID PGID LEADER SIG  signal the kernel's process group (SIG: TERM or KILL)
#   cleanup RUN                     remove the run directory of a kernel that is gone
#
# and `start`, which is not an action of its own: the start program (start.py) calls this
# function in the parent of the detached kernel it forks, when this program was put before
# it (kernelstart.DetachedProgram), so the start command's own stdio is the kernel's first
# connection.
#
# Connected, the bridge writes the line BRIDGE_READY on stdout and then relays: stdin to
# the socket, the socket to stdout, until either ends (then it exits 0). Its exit status 3
# says that no kernel is there, before it wrote any byte: no run directory or no socket (a
# kernel that ended removed it), or a socket nobody listens on (a kernel killed, whose
# socket is left). Any other failure is status 1, its reason on stderr. A socket path over
# sun_path's 108 bytes is connected through the run directory (/proc/self/fd/N/kernel.sock).
# start connects as soon as the kernel's socket answers, which is after the kernel read
# its token from the stdin the two share: only then does the bridge read stdin, and the
# controller writes nothing after the token until it has read the ready line. It exits 3
# when the kernel ends first, 1 after 30 s without a socket.
#
# signal checks that PID runs, leads group PGID and started at LEADER (clock ticks since
# boot, field 22 of /proc/PID/stat), else exits 3, so a pid given to a later process is
# never signalled (a pidfd of the leader is held open from before the check, and KILL
# stops the leader through it). TERM goes to the group (the kernel ends its jobs' groups
# itself). KILL stops the kernel, SIGKILLs every
# process below it and the group each leads until none is left (the kernel is their
# subreaper: orphans are below it too), then SIGKILLs the kernel's group. It exits 4 when
# the kernel was started in another pid namespace than this command runs in (its pid
# names another process here: a wrapper that makes a pid namespace per command), as the
# run directory's pid file (start.py) records it.
#
# cleanup removes RUN only when it is a run directory (a directory of this user, mode
# 0700, holding only the kernel's files: kernel.sock, kernel.log, pid); it exits 0 when RUN
# is gone, 1 when RUN is something else. Having removed it, it writes "killed" when the
# socket was left (a kernel removes its socket when it ends by itself) and "ended"
# otherwise; nothing when RUN was not there.
def _kennel_bridge(argv, child=0):
    import os

    ready = b"BRIDGE_READY\n"

    def say(message):
        try:
            os.write(2, b"kennel bridge: " + message + b"\n")
        except OSError:
            pass

    def fail(message, code=1):
        say(message)
        os._exit(code)

    def write_all(fd, data):
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]

    def connect(run):
        import socket

        path = os.path.join(run, b"kernel.sock")
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            if len(path) < 108:
                s.connect(path)
            else:
                fd = os.open(run, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
                try:
                    s.connect(b"/proc/self/fd/%d/kernel.sock" % fd)
                finally:
                    os.close(fd)
        except BaseException:
            s.close()
            raise
        return s

    def relay(s):
        import _thread

        write_all(1, ready)

        def inbound():
            try:
                while True:
                    data = os.read(0, 1 << 16)
                    if not data:
                        break
                    s.sendall(data)
            except OSError:
                pass
            os._exit(0)

        _thread.start_new_thread(inbound, ())
        try:
            while True:
                data = s.recv(1 << 16)
                if not data:
                    break
                write_all(1, data)
        except OSError:
            pass
        os._exit(0)

    def stat(pid):
        # (state, pgid, start time) of /proc/<pid>/stat, or None.
        try:
            with open("/proc/%d/stat" % pid, "rb") as f:
                rest = f.read().rpartition(b")")[2].split()
            return rest[0], int(rest[2]), int(rest[19])
        except (OSError, IndexError, ValueError):
            return None

    def children():
        # {ppid: [pid, ...]} of the live (not zombie) processes.
        kids = {}
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                with open("/proc/%s/stat" % name, "rb") as f:
                    rest = f.read().rpartition(b")")[2].split()
            except OSError:
                continue
            if rest and rest[0] != b"Z":
                kids.setdefault(int(rest[1]), []).append(int(name))
        return kids

    def below(root):
        kids, found, todo = children(), [], [root]
        while todo:
            for pid in kids.get(todo.pop(), ()):
                found.append(pid)
                todo.append(pid)
        return found

    def pid_namespace():
        try:
            return os.readlink("/proc/self/ns/pid").encode("ascii", "replace")
        except OSError:
            return None

    action, args = argv[0], argv[1:]
    if action == b"start":
        import time

        run = args[0]
        deadline = time.monotonic() + 30
        while True:
            if os.waitpid(child, os.WNOHANG)[0]:
                fail(b"the detached kernel ended before its socket was up", 3)
            try:
                relay(connect(run))
            except (FileNotFoundError, NotADirectoryError, ConnectionRefusedError):
                pass
            except OSError as exc:
                fail(b"connect to the kernel in %s: %s" % (run, str(exc).encode("utf-8", "replace")))
            if time.monotonic() > deadline:
                fail(b"no socket from the detached kernel within 30 s")
            time.sleep(0.005)
    if action == b"attach" and len(args) == 1:
        run = args[0]
        try:
            s = connect(run)
        except (FileNotFoundError, NotADirectoryError):
            fail(b"no kernel at %s: no socket (the kernel ended, or never started)" % run, 3)
        except ConnectionRefusedError:
            fail(
                b"no kernel listens at %s/kernel.sock: the socket is left, so the kernel was killed, not "
                b"ended by itself (a wrapper whose pid namespace or --die-with-parent ends with its first "
                b"command kills a detached kernel with it)" % run,
                3,
            )
        except OSError as exc:
            fail(b"connect to the kernel in %s: %s" % (run, str(exc).encode("utf-8", "replace")))
        relay(s)
    if action == b"signal" and len(args) == 5:
        import signal
        import time

        run = args[0]
        try:
            pid, pgid, leader = int(args[1]), int(args[2]), int(args[3])
            sig = {b"TERM": signal.SIGTERM, b"KILL": signal.SIGKILL}[args[4]]
        except (ValueError, KeyError):
            fail(b"signal: want RUN PID PGID LEADER TERM|KILL")
        if pid <= 1 or pgid <= 1:
            fail(b"signal: no such kernel (pid %d, group %d)" % (pid, pgid), 3)
        try:
            with open(os.path.join(run, b"pid"), "rb") as f:
                recorded = f.read().split()
        except OSError:
            recorded = []
        here = pid_namespace()
        if len(recorded) > 2 and recorded[2] != b"-" and here is not None and recorded[2] != here:
            fail(
                b"the kernel runs in pid namespace %s, this command in %s: its processes cannot be "
                b"signalled from here (a wrapper that makes a pid namespace per command, as bwrap "
                b"--unshare-pid does)" % (recorded[2], here),
                4,
            )
        try:
            fd = os.pidfd_open(pid)
        except AttributeError:
            fd = None
        except OSError:
            fail(b"no kernel: process %d is gone" % pid, 3)
        try:
            st = stat(pid)
            if st is None or st[0] == b"Z" or st[1] != pgid or st[2] != leader:
                fail(b"no kernel: process %d is gone or is another process" % pid, 3)
            send = lambda s: (signal.pidfd_send_signal(fd, s) if fd is not None and hasattr(signal, "pidfd_send_signal") else os.kill(pid, s))
            if sig == signal.SIGKILL:
                send(signal.SIGSTOP)
                for _ in range(100):
                    left = below(pid)
                    if not left:
                        break
                    for p in left:
                        for kill in (os.killpg, os.kill):
                            try:
                                kill(p, signal.SIGKILL)
                            except OSError:
                                pass
                    time.sleep(0.005)
            os.killpg(pgid, sig)
        except OSError as exc:
            fail(b"signal group %d: %s" % (pgid, str(exc).encode("utf-8", "replace")))
        finally:
            if fd is not None:
                os.close(fd)
        os._exit(0)
    if action == b"cleanup" and len(args) == 1:
        import stat as modes

        run = args[0]
        try:
            info = os.lstat(run)
        except FileNotFoundError:
            os._exit(0)
        except OSError as exc:
            fail(b"cleanup %s: %s" % (run, str(exc).encode("utf-8", "replace")))
        if not modes.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or modes.S_IMODE(info.st_mode) != 0o700:
            fail(b"cleanup %s: not a kernel's run directory (a 0700 directory of this user): left as it is" % run)
        names = os.listdir(run)
        if not set(names) <= {b"kernel.sock", b"kernel.log", b"pid"}:
            fail(b"cleanup %s: holds more than a kernel's files: left as it is" % run)
        try:
            for name in names:
                os.unlink(os.path.join(run, name))
            os.rmdir(run)
        except FileNotFoundError:
            pass
        except OSError as exc:
            fail(b"cleanup %s: %s" % (run, str(exc).encode("utf-8", "replace")))
        write_all(1, b"killed\n" if b"kernel.sock" in names else b"ended\n")
        os._exit(0)
    fail(b"usage: attach RUN | signal RUN PID PGID LEADER TERM|KILL | cleanup RUN")
