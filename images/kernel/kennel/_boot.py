"""Start-up of the kennel kernel: the hello frame first, everything else after.

This module imports nothing beyond what the interpreter has loaded at start (``os``,
``sys``, the built-in ``_signal``), so the ``hello`` frame goes out about as fast as
``python -I -S -c pass`` ends.
The rest of the stub (json, threading, subprocess) is imported after the hello.

The hello is formatted by hand: every value in it is an int or a string checked to be
hex digits, so no JSON encoder is needed to make it valid.

With KENNEL_KERNEL_RUN set the kernel is detached (protocol 2): it writes no hello on
stdio, reads its token from fd 0 and serves <run>/kernel.sock through kennel._link: the
same kernel proper then reads and writes its frames through the link's attached
connection instead of stdio (see _detach).
"""

import os
import sys

# Environment entries the Go side sets (package images documents them).
ENV_BUNDLE = "KENNEL_KERNEL_BUNDLE"
# The run directory of a detached kernel (protocol 2); unset or empty: protocol 1.
ENV_RUN = "KENNEL_KERNEL_RUN"
# Set to "1" (beside ENV_RUN) for a kernel started ahead of its session, in a pool: it
# loads the kernel proper, then reads a start block (token, environment, working
# directory) from fd 0 instead of the token alone.
ENV_POOLED = "KENNEL_KERNEL_POOLED"

_HEX = frozenset("0123456789abcdef")


def _bundle_hash():
    value = os.environ.get(ENV_BUNDLE, "")
    if len(value) != 64 or not set(value) <= _HEX:
        return ""
    return value


def _write_all(fd, data):
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _ignore(signum, frame):
    pass


def _catch_term():
    """Catch SIGTERM from now on: the interpreter's C handler writes the signal's number
    into a pipe (its wakeup fd) that the kernel's signal thread reads once it runs, so a
    TERM that comes before then is kept, neither lost nor left to the default action.
    Returns the pipe's read end (not inherited by children)."""
    import _signal  # built in, loaded at start: no import cost

    r, w = os.pipe()
    os.set_blocking(w, False)
    _signal.set_wakeup_fd(w, warn_on_full_buffer=False)
    _signal.signal(_signal.SIGTERM, _ignore)
    return r


class Boot:
    """The descriptors start-up made, handed to the kernel proper.

    frames_in and frames_out are private duplicates of the original stdin and stdout:
    the frame channel. diag is the original stderr, for a fatal error of the stub itself.
    out_r and err_r are the read ends of the pipes fds 1 and 2 now point at. signals is
    the read end of the signal wakeup pipe (see _catch_term).

    A detached kernel (KENNEL_KERNEL_RUN set) has link, its kennel._link.Link: then
    frames_in and frames_out are None (the kernel proper reads and writes frames through
    the link), and diag is the run directory's kernel.log. link is None for protocol 1.
    """

    __slots__ = (
        "frames_in", "frames_out", "diag", "out_r", "err_r", "pid", "pgid", "signals", "link",
    )


def _capture(boot):
    """Point fd 0 at /dev/null and fds 1 and 2 at pipes the kernel reads (boot.out_r,
    boot.err_r), so nothing else reads the frames or writes into them."""
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    boot.out_r, out_w = os.pipe()
    boot.err_r, err_w = os.pipe()
    os.dup2(out_w, 1)
    os.dup2(err_w, 2)
    os.close(out_w)
    os.close(err_w)


def _fail(message):
    """A detached start that cannot go on: message on stderr, exit 2."""
    try:
        _write_all(2, ("kennel: %s\n" % message).encode("utf-8", "replace"))
    except OSError:
        pass
    os._exit(2)


def _detach(run):
    """Start-up of a detached kernel (docs/protocol.md, "Protocol 2"): check the run
    directory, read the token from fd 0, lead a session, bind kernel.sock, point fds 0,
    1 and 2 at /dev/null and kernel.log (then 1 and 2 at the capture pipes, as for
    protocol 1) and make the link the kernel proper's frame channel. Any failure
    before the socket serves ends the process with status 2 and a message on stderr
    (kernel.log once it is open).
    Runs before any thread exists (listen changes the working directory).

    A pooled kernel (ENV_POOLED) does all of that but the link before its session
    comes, the kernel proper loaded too; then it reads its start block (token,
    environment, working directory) from what was fd 0, takes the session's environment
    whole and its working directory, and makes the link: a hand-out costs that alone."""
    from kennel import _link

    pooled = os.environ.get(ENV_POOLED, "") == "1"
    if pooled:
        from kennel import _kernel  # noqa: F401  (loaded while the kernel waits)
    try:
        run_path, run_fd, kernel_id = _link.open_run_dir(run)
        start_fd = os.dup(0) if pooled else -1
        token = None if pooled else _link.read_token(0)
    except _link.BootError as exc:
        _fail(str(exc))
    pid = os.getpid()
    if os.getsid(0) != pid:
        try:
            os.setsid()
        except OSError as exc:
            # A process group leader cannot start a session: under a container's init the
            # kernel leads its group already, which is what its end needs.
            if os.getpgrp() != pid:
                _fail("cannot lead a session or a process group: %s" % exc)
    from kennel import _sweep

    _sweep.become_subreaper()
    try:
        sock, sock_id = _link.listen(run_fd)
    except OSError as exc:
        _fail("bind %s/%s: %s" % (run_path, _link.SOCKET_NAME, exc))
    try:
        log = os.open(
            _link.LOG_NAME,
            os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
            0o600,
            dir_fd=run_fd,
        )
    except OSError as exc:
        try:
            os.unlink(_link.SOCKET_NAME, dir_fd=run_fd)
        except OSError:
            pass
        _fail("open %s/%s: %s" % (run_path, _link.LOG_NAME, exc))
    os.dup2(log, 1)
    os.dup2(log, 2)
    boot = Boot()
    boot.pid = pid
    boot.pgid = os.getpgrp()
    boot.diag = log
    boot.frames_in = boot.frames_out = None  # the kernel proper reads and writes the link
    _capture(boot)
    boot.signals = _catch_term()
    if pooled:
        try:
            token, env, where = _link.read_start(start_fd)
            os.close(start_fd)
            os.chdir(where)
        except (_link.BootError, OSError) as exc:
            try:
                _write_all(log, ("kennel: %s\n" % (exc,)).encode("utf-8", "replace"))
            except OSError:
                pass
            os._exit(2)
        # The session's environment, whole: nothing of the pool's stays.
        os.environ.clear()
        os.environ.update(env)
    # Cells and jobs do not inherit what made this kernel detached, nor an owner to die
    # with: a detached kernel outlives whoever started it.
    for name in (ENV_RUN, ENV_POOLED, "KENNEL_KERNEL_OWNER_PID", "KENNEL_KERNEL_OWNER"):
        os.environ.pop(name, None)
    version = sys.version_info
    boot.link = _link.Link(
        run_path, run_fd, kernel_id, token, sock, sock_id, log,
        {
            "pid": pid,
            "pgid": boot.pgid,
            "leader": _link.start_time(pid),
            "python": "%d.%d.%d" % (version[0], version[1], version[2]),
            "bundle": _bundle_hash(),
        },
    )
    _sweep.start_reaping()
    return boot


def _attach():
    """Start-up of a protocol 1 kernel: the frame channel is stdin and stdout, and the
    hello goes out first."""
    pid = os.getpid()
    try:
        if os.getpgrp() != pid:
            os.setpgid(0, 0)
    except OSError:
        pass  # a session leader cannot change its group; it leads one already
    boot = Boot()
    boot.pid = pid
    boot.pgid = os.getpgrp()
    boot.link = None
    # The frame channel: private copies of stdin and stdout (not inherited by children).
    boot.frames_in = os.dup(0)
    boot.frames_out = os.dup(1)
    boot.diag = os.dup(2)
    # Nothing else may read the frames or write into them: stdin becomes /dev/null and
    # fds 1 and 2 become pipes the kernel reads and forwards as stream frames.
    _capture(boot)
    # From the hello on, a SIGTERM ends the kernel through its signal thread (exit 143).
    boot.signals = _catch_term()
    version = sys.version_info
    hello = (
        '{"event":"hello","id":"","protocol":1,"pid":%d,"pgid":%d,'
        '"python":"%d.%d.%d","bundle":"%s"}\n'
        % (boot.pid, boot.pgid, version[0], version[1], version[2], _bundle_hash())
    )
    try:
        _write_all(boot.frames_out, hello.encode("ascii"))
    except OSError:
        os._exit(1)  # nobody reads the frames
    return boot


def main():
    """Run the kernel: set up descriptors, write hello (protocol 1) or serve the run
    directory's socket (detached, KENNEL_KERNEL_RUN set), serve frames until the end."""
    run = os.environ.get(ENV_RUN, "")
    boot = _detach(run) if run else _attach()
    try:
        from kennel import _kernel

        _kernel.serve(boot)
    except BaseException as exc:  # the stub itself failed: say so where a person looks
        try:
            import traceback

            text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        except BaseException:
            text = "kennel: stub failed: %r\n" % (exc,)
        try:
            _write_all(boot.diag, text.encode("utf-8", "replace"))
        except OSError:
            pass
        os._exit(1)
    os._exit(0)
