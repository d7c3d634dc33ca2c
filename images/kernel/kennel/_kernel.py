"""The kernel proper: reads host frames, runs cells on the main thread, owns the state.

Threads: the main thread runs cells one at a time from a queue, in arrival order; the
reader thread reads host frames and dispatches them (execute to the queue, interrupt,
host replies, jobs, shutdown); one thread per captured fd; one per job; the owner and
signal watchers. Interrupts reach the main thread as a real SIGINT (pthread_kill), so a
cell blocked in a system call (time.sleep, a lock) wakes too; the handler raises
KeyboardInterrupt only in the cell the interrupt names, and holds it back while the main
thread writes a frame.
"""

import builtins
import json
import os
import queue
import signal
import sys
import threading
import types

import kennel
from kennel import _capture, _cells, _frames, _host, _jobs, _lifetime


class Kernel:
    def __init__(self, boot):
        self.boot = boot
        self.main_ident = threading.get_ident()
        # The id of the cell running on the main thread, or None. Read by any thread.
        self.running = None
        # The cell that owns what fds 1 and 2 carry: set when a cell starts, cleared only
        # once its output has been drained after it ended. Read under a pipe's lock.
        self.output_owner = None
        # Frame writes in progress on the main thread; an interrupt waits for them.
        self.critical = 0
        self.pending_interrupt = False
        self.interrupt_target = None
        self.writer = _frames.Writer(boot.frames_out, self)
        self.cells = queue.SimpleQueue()
        self.host = _host.Requests(self)
        self.jobs = _jobs.Jobs(self)
        self.life = _lifetime.Lifetime(self, _lifetime.grace_from_env(os.environ, self.writer.log))
        self.pipes = (
            _capture.Pipe(self, boot.out_r, "stdout"),
            _capture.Pipe(self, boot.err_r, "stderr"),
        )
        main = types.ModuleType("__main__")
        main.__dict__["__builtins__"] = builtins
        main.__dict__["kennel"] = kennel
        self.namespace = main.__dict__
        sys.modules["__main__"] = main
        self.executor = _cells.Executor(self.namespace, os.path.dirname(kennel.__file__))
        self._handlers = {
            "execute": self._on_execute,
            "interrupt": self._on_interrupt,
            "host_reply": self._on_host_reply,
            "job_run": self._on_job_run,
            "job_kill": self._on_job_kill,
            "shutdown": self._on_shutdown,
            "call": self._on_call,
        }

    # Output.

    def emit_stream(self, name, text, owner):
        """Send ``text`` as stream frames of cell ``owner`` (None or "" for no cell)."""
        owner = owner or ""
        for piece in _capture.chunks(text):
            self.writer.frame("stream", owner, (("name", name), ("text", piece)))

    def drain_output(self, owner):
        """Forward what fds 1 and 2 hold now as output of cell ``owner``."""
        for pipe in self.pipes:
            pipe.drain(owner)

    def display(self, data):
        if not isinstance(data, dict):
            raise TypeError("display: data must be a dict of MIME type to value")
        frame = _frames.encode("display", self.running or "", (("data", data),))
        if len(frame) > _frames.PAYLOAD_LIMIT:
            raise kennel.PayloadTooLarge(len(frame), _frames.PAYLOAD_LIMIT, "display")
        self.writer.write(frame)

    # Cells (main thread).

    def _on_sigint(self, signum, frame):
        target = self.interrupt_target
        self.interrupt_target = None
        running = self.running
        if running is None or (target is not None and target != running):
            return
        if self.critical:
            self.pending_interrupt = True
            return
        self.pending_interrupt = False
        raise KeyboardInterrupt

    def run_cell(self, cell_id, code):
        self.pending_interrupt = False
        self.output_owner = cell_id
        try:
            try:
                self.running = cell_id
                outcome = self.executor.run(cell_id, code)
            finally:
                self.running = None
        except KeyboardInterrupt:
            self.running = None
            outcome = _cells.interrupted()
        self.drain_output(cell_id)
        self.output_owner = None
        self._done(cell_id, outcome)

    def _done(self, cell_id, outcome):
        try:
            frame = _frames.encode("done", cell_id, outcome.fields())
        except (TypeError, ValueError) as exc:
            frame = _frames.encode(
                "done", cell_id, _cells.failure("EncodeError", str(exc)).fields()
            )
        if len(frame) > _frames.PAYLOAD_LIMIT:
            frame = _frames.encode(
                "done",
                cell_id,
                _cells.failure(
                    "PayloadTooLarge",
                    str(kennel.PayloadTooLarge(len(frame), _frames.PAYLOAD_LIMIT, "result")),
                ).fields(),
            )
        self.writer.write(frame)

    def serve_cells(self):
        while True:
            item = self.cells.get()
            if item is None:
                break
            cell_id, code = item
            if self.life.closing:
                self._done(cell_id, _cells.failure("KernelShutdown", "the kernel is shutting down"))
                continue
            self.run_cell(cell_id, code)
        # Cells queued behind the end are answered, not run.
        while True:
            try:
                item = self.cells.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                self._done(item[0], _cells.failure("KernelShutdown", "the kernel is shutting down"))
        self.life.main_free()

    # Host frames (reader thread).

    def read_frames(self):
        stream = os.fdopen(self.boot.frames_in, "rb", buffering=1 << 16)
        limit = _frames.LINE_LIMIT
        while True:
            line = stream.readline(limit + 1)
            if not line:
                break
            if len(line) > limit:
                while line and not line.endswith(b"\n"):
                    line = stream.readline(limit)
                self.writer.log("error", "a host frame over %d bytes was dropped" % limit)
                continue
            try:
                self.dispatch(line)
            except Exception as exc:  # the reader must outlive any frame
                self.writer.log("error", "frame dropped: %s: %s" % (type(exc).__name__, exc))
        self.life.begin("stdin closed")

    def dispatch(self, line):
        try:
            frame = json.loads(line)
        except ValueError as exc:
            self.writer.log("warning", "unreadable host frame dropped: %s" % (exc,))
            return
        if not isinstance(frame, dict):
            self.writer.log("warning", "host frame that is not an object dropped")
            return
        kind = frame.get("type")
        frame_id = frame.get("id", "")
        if not isinstance(frame_id, str):
            self.writer.log("warning", "host frame %r with a non-string id dropped" % (kind,))
            return
        handler = self._handlers.get(kind) if isinstance(kind, str) else None
        if handler is None:
            self.writer.log("warning", "host frame of unknown type %r dropped" % (kind,))
            return
        handler(frame_id, frame)

    def _on_execute(self, frame_id, frame):
        if self.life.closing:
            return
        self.cells.put((frame_id, frame.get("code")))

    def _on_interrupt(self, frame_id, frame):
        if self.running is None or self.running != frame_id:
            return
        self.interrupt_target = frame_id
        signal.pthread_kill(self.main_ident, signal.SIGINT)

    def _on_host_reply(self, frame_id, frame):
        self.host.reply(frame)

    def _on_job_run(self, frame_id, frame):
        self.jobs.run(frame_id, frame.get("command"))

    def _on_job_kill(self, frame_id, frame):
        self.jobs.kill(frame_id, frame.get("signal"))

    def _on_shutdown(self, frame_id, frame):
        threading.Thread(
            target=self.life.begin, args=("shutdown",), name="kennel-end", daemon=True
        ).start()

    def _on_call(self, frame_id, frame):
        self._done(frame_id, _cells.failure("Unserved", "call is not served by this kernel"))

    # Start.

    def start(self):
        for pipe in self.pipes:
            pipe.start()
        sys.stdout = _capture.StreamWriter(self, "stdout", 1)
        sys.stderr = _capture.StreamWriter(self, "stderr", 2)
        sys.stdin = open(os.devnull, "r")
        signal.signal(signal.SIGINT, self._on_sigint)
        _lifetime.SignalWatch(self._on_term).start()
        try:
            pid = _lifetime.owner_pid(os.environ)
        except ValueError:
            pid = None
            self.writer.log(
                "warning",
                "%s=%r is not a pid; not watching an owner"
                % (_lifetime.ENV_OWNER_PID, os.environ.get(_lifetime.ENV_OWNER_PID)),
            )
        if pid is not None:
            _lifetime.OwnerWatch(pid, self._on_owner_death).start()
        kennel._rt = self
        threading.Thread(target=self.read_frames, name="kennel-reader", daemon=True).start()

    def _on_owner_death(self, reason):
        self.life.begin(reason)

    def _on_term(self):
        self.life.begin("SIGTERM", grace=0.0, exit_code=143)


def _site(environ):
    """Put the interpreter's site-packages on sys.path (the kernel starts with -S so the
    hello is not held up by site's imports). KENNEL_KERNEL_SITE=0 leaves it out."""
    if environ.get("KENNEL_KERNEL_SITE", "1") == "0":
        return
    import site

    site.main()


def serve(boot):
    """Run the kernel on the main thread until it ends (it exits the process)."""
    kernel = Kernel(boot)
    kernel.start()
    try:
        _site(os.environ)
    except Exception as exc:
        kernel.writer.log("warning", "site-packages not loaded: %s: %s" % (type(exc).__name__, exc))
    kernel.serve_cells()
