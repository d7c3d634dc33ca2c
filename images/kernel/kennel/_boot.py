"""Start-up of the kennel kernel: the hello frame first, everything else after.

This module imports nothing beyond what the interpreter has loaded at start (``os``,
``sys``, the built-in ``_signal``), so the ``hello`` frame goes out about as fast as
``python -I -S -c pass`` ends.
The rest of the stub (json, threading, subprocess) is imported after the hello.

The hello is formatted by hand: every value in it is an int or a string checked to be
hex digits, so no JSON encoder is needed to make it valid.
"""

import os
import sys

# Environment entries the Go side sets (package images documents them).
ENV_BUNDLE = "KENNEL_KERNEL_BUNDLE"

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
    """

    __slots__ = ("frames_in", "frames_out", "diag", "out_r", "err_r", "pid", "pgid", "signals")


def main():
    """Run the kernel: set up descriptors, write hello, serve frames until the end."""
    pid = os.getpid()
    try:
        if os.getpgrp() != pid:
            os.setpgid(0, 0)
    except OSError:
        pass  # a session leader cannot change its group; it leads one already
    boot = Boot()
    boot.pid = pid
    boot.pgid = os.getpgrp()
    # The frame channel: private copies of stdin and stdout (not inherited by children).
    boot.frames_in = os.dup(0)
    boot.frames_out = os.dup(1)
    boot.diag = os.dup(2)
    # Nothing else may read the frames or write into them: stdin becomes /dev/null and
    # fds 1 and 2 become pipes the kernel reads and forwards as stream frames.
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    boot.out_r, out_w = os.pipe()
    boot.err_r, err_w = os.pipe()
    os.dup2(out_w, 1)
    os.dup2(err_w, 2)
    os.close(out_w)
    os.close(err_w)
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
