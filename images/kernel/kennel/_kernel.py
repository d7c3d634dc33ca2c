"""The kernel proper: reads host frames, runs cells on the main thread, owns the state.

Threads: the main thread starts cells in arrival order and reads host frames itself
while no cell runs; the reader thread reads them while a cell runs (see _reader). A cell
that awaits at top level runs as a task of the kernel's event loop, on the main thread:
while it awaits, the next cell may start (at most MAX_CELLS at once), and the reader
thread reads the frames; a synchronous cell holds the main thread, tasks included, until
it ends. One thread per captured fd, one per job, the owner and signal watchers, the
memory guard, the deadlines, one per running synchronous @remote call.
Interrupts reach the main thread as a real SIGINT (pthread_kill), so a cell blocked in
a system call (time.sleep, a lock) wakes too; the handler raises KeyboardInterrupt only
in the cell the interrupt names (a task's context names its cell), and holds it back
while the main thread writes a frame; a task that awaits is cancelled instead.
An interrupt for a cell not started yet (queued, or not yet arrived) is remembered, for
the newest 1024 such ids: that cell is answered ``interrupted`` at its turn, unrun. One for
a cell that has finished is ignored.

A detached kernel (protocol 2, boot.link set) also dedupes ``execute`` by cell id, since a
new controller may send one again: one for a queued or running cell is ignored, one for a
finished cell is answered with that cell's ``done`` again (the newest 16 are kept, at most
32 MiB of them; one finished earlier is ignored with a ``log``).
"""

import builtins
import collections
import json
import os
import select
import signal
import sys
import threading
import types

import kennel
from kennel import _capture, _cells, _deadlines, _frames, _host, _jobs, _lifetime, _memory, _reader


_decoder = json.JSONDecoder()
_raw_decode = _decoder.raw_decode


def _decode(text):
    """json.loads of one frame: raw_decode, then only whitespace may follow."""
    try:
        value, end = _raw_decode(text)
    except ValueError:
        return _decoder.decode(text)  # leading whitespace, or a real error
    if end != len(text) and text[end:].strip(" \t\r\n"):
        return _decoder.decode(text)  # raises "Extra data"
    return value

# How long a cell runs before the reader thread takes over reading host frames.
_READER_TICK_MS = 20
# Cell ids remembered as interrupted before they started, and as finished: the newest.
_REMEMBERED_IDS = 1024
# At most this many cells run at once (tasks awaiting, and the one on the main thread);
# a cell queued past them waits for one to end.
MAX_CELLS = 16
# The stream id of fd-level output while more than one cell runs: no cell can be named.
NATIVE = "native"
# A detached kernel keeps the done frames of this many newest finished cells, and at most
# this many bytes of them (the newest is kept whatever its size).
_KEPT_DONES = 16
_KEPT_DONE_BYTES = 32 << 20


class Kernel:
    """All the state of one kernel process; built and started once by serve."""

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
        # Orders interrupts against cells starting and ending: held to set ``running`` as
        # a cell starts, to record its end, and to decide on an interrupt.
        self._cells_lock = threading.Lock()
        # Ids of cells interrupted before they started, and of cells that have ended (an
        # interrupt for one is ignored); under _cells_lock.
        self.early_interrupts = _cells.RecentIds(_REMEMBERED_IDS)
        self._finished = _cells.RecentIds(_REMEMBERED_IDS)
        # Cells the kernel itself interrupted (the memory guard, a deadline), under
        # _cells_lock: cell id -> (reason, details...), taken when the cell ends.
        self._reasons = {}
        # Cells that await at top level run as tasks of the kernel's event loop (made at
        # the first): cell id -> task, changed by the main thread under _cells_lock. While
        # one awaits, the next queued cell may start.
        self.tasks = {}
        self.loop = None
        # Async @remote calls: coroutines queued for the loop by any thread (started by
        # the main thread), and the tasks running them.
        self.loop_calls = collections.deque()
        self.call_tasks = set()
        self.deadlines = _deadlines.Deadlines(self._interrupt_at_deadline)
        # Detached only, under _cells_lock: ids of cells queued or running (until their
        # done is written), the done frames of the newest finished cells, and the ids of
        # cells finished before those.
        self.detached = boot.link is not None
        self._live_cells = set()
        self._done_frames = collections.OrderedDict()
        self._done_bytes = 0
        self._done_long_ago = _cells.RecentIds(_REMEMBERED_IDS)
        if boot.link is not None:
            self.writer = _frames.Writer(None, self, send=boot.link.send)
        else:
            self.writer = _frames.Writer(boot.frames_out, self)
            _frames.widen_pipe(boot.frames_out)
        # Cells to run, (id, code, timeout ms or None), in arrival order; None ends the
        # main loop. Appended
        # by whichever thread dispatches; popped by the main thread only.
        self.cells = collections.deque()
        self._main_wake_r, self._main_wake_w = _wake_pipe()
        self._reader_wake_r, self._reader_wake_w = _wake_pipe()
        # Whether the reader thread reads stdin now (see read_while_cells_run).
        self.reader_engaged = False
        self._ended_input = False
        self._read_lock = threading.Lock()
        if boot.link is not None:
            self.source = boot.link.source(self.dispatch_frame, self.writer.log)
        else:
            self.source = _reader.Source(boot.frames_in, self.dispatch, self.writer.log)
        self._main_poller = select.poll()
        self._main_poller.register(self._main_wake_r, select.POLLIN)
        self._main_poller.register(self.source.fd, select.POLLIN)
        self.host = _host.Requests(self)
        self.jobs = _jobs.Jobs(self)
        self.life = _lifetime.Lifetime(self, _lifetime.grace_from_env(os.environ, self.writer.log))
        self.pipes = (
            _capture.Pipe(self, boot.out_r, "stdout"),
            _capture.Pipe(self, boot.err_r, "stderr"),
        )
        self._drainer = _capture.Drainer(self.pipes)
        main = types.ModuleType("__main__")
        main.__dict__["__builtins__"] = builtins
        main.__dict__["kennel"] = kennel
        self.namespace = main.__dict__
        sys.modules["__main__"] = main
        self.executor = _cells.Executor(self.namespace, os.path.dirname(kennel.__file__))
        self._remote = None
        self._remote_lock = threading.Lock()
        self.memory = _memory.Guard(
            _memory.cap_from_env(os.environ, self.writer.log), self._interrupt_for_memory
        )
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

    def owner(self):
        """The id the calling thread's output and requests belong to: a @remote call's on
        its own thread, a cell's in its task, else the running cell's ("" for none)."""
        return _capture.owner.get() or self.running or ""

    def current(self):
        """Main thread: the cell whose code runs now (a task's in its step), or None."""
        return _capture.owner.get() or self.running

    def _set_output_owner(self):
        """Who owns fd-level output now: the one live cell, or NATIVE while several run."""
        if not self.tasks:
            self.output_owner = self.running
            return
        live = len(self.tasks) + (self.running is not None)
        if live > 1:
            self.output_owner = NATIVE
        elif self.running is not None:
            self.output_owner = self.running
        elif self.tasks:
            self.output_owner = next(iter(self.tasks))
        else:
            self.output_owner = None

    def emit_stream(self, name, text, owner):
        """Send ``text`` as stream frames of cell ``owner`` (None or "" for no cell),
        coalesced with the writes around it (_frames.Writer.stream)."""
        self.writer.stream(owner or "", name, text)

    def drain_output(self, owner):
        """Forward what fds 1 and 2 hold now as output of cell ``owner``."""
        self._drainer.drain(owner)

    def display(self, data):
        if not isinstance(data, dict):
            raise TypeError("display: data must be a dict of MIME type to value")
        frame = _frames.encode("display", self.owner(), (("data", data),))
        if len(frame) > _frames.PAYLOAD_LIMIT:
            raise kennel.PayloadTooLarge(len(frame), _frames.PAYLOAD_LIMIT, "display")
        self.writer.write(frame)

    # Cells (main thread).

    def _on_sigint(self, signum, frame):
        target = self.interrupt_target
        self.interrupt_target = None
        # The cell whose code runs now: a task's (its context names it) or the sync one.
        running = self.current()
        if running is None or (target is not None and target != running):
            return
        if self.critical:
            self.pending_interrupt = True
            return
        self.pending_interrupt = False
        raise KeyboardInterrupt

    def _take_cell(self, run=True):
        """Main thread: pop the next queued cell (the queue is not empty).

        Returns None for the end of the queue; (id, code, None) for a cell to run, which
        is then ``running``, with ``critical`` raised by one until run_cell begins (so an
        interrupt that comes meanwhile is held, not lost); or (id, None, outcome) for a
        cell answered without running: interrupted before it started, or queued behind
        the kernel's end (or ``run`` is False).
        """
        with self._cells_lock:
            item = self.cells.popleft()
            if item is None:
                return None
            cell_id, code, timeout = item
            if self.early_interrupts.take(cell_id):
                outcome = _cells.interrupted()
            elif run and not self.life.closing:
                self.pending_interrupt = False
                self.critical += 1
                self.running = cell_id
                return cell_id, (code, timeout), None
            else:
                outcome = _cells.failure("KernelShutdown", "the kernel is shutting down")
            self._finished.add(cell_id)
        return cell_id, None, outcome

    def run_cell(self, cell_id, code, timeout=None):
        """Run cell ``cell_id`` that _take_cell made the running one, and answer it; a
        cell that awaits at top level becomes a task instead, run to its first await
        here, and answered when its task ends."""
        memory = self.memory
        started = False
        try:
            try:
                self.critical -= 1
                if not self.critical and self.pending_interrupt:
                    self.pending_interrupt = False
                    raise KeyboardInterrupt
                prepared = self.executor.prepare(cell_id, code)
                if isinstance(prepared, _cells.Outcome):
                    outcome = prepared
                else:
                    body, tail, is_async = prepared
                    if timeout is not None:
                        self.deadlines.add(cell_id, timeout)
                    memory.started(cell_id)
                    started = True
                    if is_async:
                        self._start_task(cell_id, body, tail)
                        return
                    self._set_output_owner()
                    outcome = self.executor.run_prepared(body, tail)
            finally:
                self.running = None
        except KeyboardInterrupt:
            self.running = None
            outcome = _cells.interrupted()
        self._ended(cell_id, outcome, started)

    def _ended(self, cell_id, outcome, started=True):
        """Main thread: cell ``cell_id`` ended with ``outcome``: record it, drain what fds
        1 and 2 hold, and write its done."""
        if started:
            self.memory.ended(cell_id)
            self.deadlines.cancel(cell_id)
        with self._cells_lock:
            self.tasks.pop(cell_id, None)
            self._finished.add(cell_id)
            # An interrupt between its end and now was taken for one not started yet.
            self.early_interrupts.take(cell_id)
            reason = self._reasons.pop(cell_id, None) if self._reasons else None
        if reason is not None and outcome.status == _cells.INTERRUPTED:
            self._explain(outcome, reason)
        if self.reader_engaged:
            _poke(self._reader_wake_w)
        owner = self.output_owner if self.output_owner == NATIVE else cell_id
        self.drain_output(owner)
        self._set_output_owner()
        self._done(cell_id, outcome)

    # Cells that await (main thread).

    def _event_loop(self):
        loop = self.loop
        if loop is None:
            import asyncio

            loop = self.loop = asyncio.new_event_loop()
            # A cell queued (or the end) from another thread wakes the loop: serve_cells
            # then starts it.
            loop.add_reader(self._main_wake_r, self._on_loop_wake)
        return loop

    def _on_loop_wake(self):
        _drain(self._main_wake_r)
        self.loop.stop()

    def _start_task(self, cell_id, body, tail):
        """Start cell ``cell_id`` as a task and run it to its first await; its end
        answers it (_task_done)."""
        loop = self._event_loop()
        task = loop.create_task(self._run_task(cell_id, body, tail))
        with self._cells_lock:
            self.tasks[cell_id] = task
            # From now on the task's context names the cell whose code runs (current).
            self.running = None
        task.add_done_callback(self._task_done)
        self._set_output_owner()
        # One turn of the loop: the task runs until its first await before anything else
        # (the next cell) starts.
        loop.call_soon(loop.stop)
        self._run_loop()

    async def _run_task(self, cell_id, body, tail):
        _capture.owner.set(cell_id)
        outcome = await self.executor.run_async(body, tail)
        return cell_id, outcome

    def _task_done(self, task):
        if task.cancelled():
            cell_id = next((c for c, t in self.tasks.items() if t is task), None)
            outcome = _cells.interrupted()
        else:
            cell_id, outcome = task.result()
        if cell_id is not None:
            self._ended(cell_id, outcome)
        self.loop.stop()  # a slot is free: serve_cells looks at the queue again

    def run_on_loop(self, coro):
        """Run coroutine ``coro`` (an async @remote call) as a task of the kernel's event
        loop, from any thread: it starts when the main thread is free of synchronous
        cells, and runs while the loop does."""
        self.loop_calls.append(coro)
        if threading.get_ident() != self.main_ident:
            _poke(self._main_wake_w)

    def _start_calls(self):
        loop = self._event_loop()
        calls = self.loop_calls
        while calls:
            task = loop.create_task(calls.popleft())
            self.call_tasks.add(task)
            task.add_done_callback(self._call_done)

    def _call_done(self, task):
        self.call_tasks.discard(task)
        self.loop.stop()

    def _run_loop(self):
        """Run the event loop until something stops it: a turn's end, a task's end, a
        cell queued. A KeyboardInterrupt meant for no task that reaches the loop itself
        is dropped."""
        while True:
            try:
                self.loop.run_forever()
                return
            except KeyboardInterrupt:
                continue

    def _cancel_task(self, cell_id):
        """Main thread (in the loop): cancel the task of cell ``cell_id`` if it awaits."""
        task = self.tasks.get(cell_id)
        if task is not None and not task.done():
            task.cancel()

    def _interrupt_running(self, cell_id):
        """Interrupt cell ``cell_id`` if it runs: KeyboardInterrupt in its code when it
        is on the main thread, the cancellation of its task when it awaits (once the loop
        has the main thread again). _cells_lock is held. Returns whether it runs."""
        if cell_id in self.tasks:
            self.interrupt_target = cell_id
            signal.pthread_kill(self.main_ident, signal.SIGINT)
            try:
                self.loop.call_soon_threadsafe(self._cancel_task, cell_id)
            except RuntimeError:
                pass  # the loop is closed: the kernel is ending
            return True
        if self.running == cell_id:
            self.interrupt_target = cell_id
            signal.pthread_kill(self.main_ident, signal.SIGINT)
            return True
        return False

    def _interrupt_for_memory(self, cell_id, footprint, cap):
        """The memory guard's interrupt (its thread): interrupt cell ``cell_id`` with
        reason memory if it still runs; return whether it did."""
        with self._cells_lock:
            if self.running != cell_id and cell_id not in self.tasks:
                return False
            self._reasons[cell_id] = (_memory.MEMORY, footprint, cap)
            return self._interrupt_running(cell_id)

    def _interrupt_at_deadline(self, cell_id, timeout_ms):
        """The deadline thread: interrupt cell ``cell_id`` with reason timeout if it
        still runs."""
        with self._cells_lock:
            if self.running != cell_id and cell_id not in self.tasks:
                return
            self._reasons[cell_id] = (_deadlines.TIMEOUT, timeout_ms)
            self._interrupt_running(cell_id)

    def _explain(self, outcome, reason):
        """Give a cell the kernel interrupted its reason and note."""
        kind = reason[0]
        outcome.reason = kind
        if kind == _deadlines.TIMEOUT:
            outcome.note = "interrupted: the cell's timeout of %d ms passed" % (reason[1],)
            return
        footprint, cap = reason[1], reason[2]
        try:
            outcome.note = _memory.note(self.namespace, footprint, cap)
        except Exception as exc:
            outcome.note = "interrupted: memory past its cap of %s (%s)" % (_memory.mib(cap), type(exc).__name__)

    def _done(self, cell_id, outcome, cell=True):
        """Write the done frame of ``cell_id`` (``cell`` False: of a ``call``, no cell)."""
        try:
            if outcome.status == _cells.OK and outcome.error is None:
                frame = _frames.encode_done_ok(cell_id, outcome.result)
            else:
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
        if self.detached and cell:
            self._keep_done(cell_id, frame)

    def _keep_done(self, cell_id, frame):
        with self._cells_lock:
            self._live_cells.discard(cell_id)
            kept = self._done_frames
            old = kept.pop(cell_id, None)
            if old is not None:
                self._done_bytes -= len(old)
            kept[cell_id] = frame
            self._done_bytes += len(frame)
            while len(kept) > _KEPT_DONES or (len(kept) > 1 and self._done_bytes > _KEPT_DONE_BYTES):
                gone, old = kept.popitem(last=False)
                self._done_bytes -= len(old)
                self._done_long_ago.add(gone)

    def live_cells(self):
        """How many cells are queued or running (detached kernels count them)."""
        with self._cells_lock:
            return len(self._live_cells)

    def post(self, item):
        """Queue a cell (or None, the end) for the main thread and wake it."""
        self.cells.append(item)
        if threading.get_ident() != self.main_ident:
            _poke(self._main_wake_w)

    def serve_cells(self):
        """The main loop: run queued cells; while there are none, read host frames (or,
        while cells await, run the event loop: the reader thread reads frames then)."""
        cells = self.cells
        while True:
            if self.loop_calls:
                self._start_calls()
            if not cells or len(self.tasks) >= MAX_CELLS:
                if self.tasks or self.call_tasks:
                    self._run_loop()
                else:
                    self.pump_once()
                continue
            taken = self._take_cell()
            if taken is None:
                break
            cell_id, code, outcome = taken
            if outcome is None:
                self.run_cell(cell_id, code[0], code[1])
            else:
                self._done(cell_id, outcome)
        # Cells queued behind the end are answered, not run; the cells that await run on
        # to their end (the kernel's end bounds that).
        while cells:
            taken = self._take_cell(run=False)
            if taken is not None:
                self._done(taken[0], taken[2])
        while self.tasks:
            self._run_loop()
        self.life.main_free()

    def pump_once(self):
        """Main thread: wait for host frames or a wake, and dispatch what came. A
        KeyboardInterrupt for the running cell may end the wait, never a read."""
        source = self.source
        seen = source.reads
        for fd, _ in self._main_poller.poll():
            if fd == self._main_wake_r:
                _drain(fd)
                continue
            self.critical += 1
            try:
                with self._read_lock:
                    alive = source.pump(ready=source.reads == seen)
            finally:
                self.critical -= 1
            if not alive:
                self._input_ended()
        if not self.critical and self.pending_interrupt:
            self.pending_interrupt = False
            if self.current() is not None:
                raise KeyboardInterrupt

    def wake_main(self):
        """Wake the main thread from pump_once (from any thread)."""
        _poke(self._main_wake_w)

    def _input_ended(self):
        if self._ended_input:
            return
        self._ended_input = True
        try:
            self._main_poller.unregister(self.source.fd)
        except (KeyError, ValueError):
            pass
        threading.Thread(
            target=self.life.begin, args=("stdin closed",), name="kennel-end", daemon=True
        ).start()

    def read_while_cells_run(self):
        """The reader thread: reads host frames while a cell holds the main thread.

        It engages only once a cell has run for a tick (a short cell costs no thread
        switch); until then frames wait in the pipe, and a cell's own host requests
        read them from the main thread (Requests.call).
        """
        idle = select.poll()
        idle.register(self._reader_wake_r, select.POLLIN)
        busy = select.poll()
        busy.register(self._reader_wake_r, select.POLLIN)
        busy.register(self.source.fd, select.POLLIN)
        while True:
            if self.running is None and not self.tasks and not self.call_tasks:
                self.reader_engaged = False
                if idle.poll(_READER_TICK_MS):
                    _drain(self._reader_wake_r)
                continue
            self.reader_engaged = True
            events = busy.poll()
            for fd, _ in events:
                if fd == self._reader_wake_r:
                    _drain(fd)
            if self.running is None and not self.tasks and not self.call_tasks:
                continue
            if any(fd == self.source.fd for fd, _ in events):
                with self._read_lock:
                    if self.source.eof:
                        return
                    alive = self.source.pump()
                if not alive:
                    self.life.begin("stdin closed")
                    return

    def dispatch(self, line):
        try:
            frame = _decode(line.decode("utf-8"))
        except ValueError as exc:
            self.writer.log("warning", "unreadable host frame dropped: %s" % (exc,))
            return
        if not isinstance(frame, dict):
            self.writer.log("warning", "host frame that is not an object dropped")
            return
        self.dispatch_frame(frame)

    def dispatch_frame(self, frame):
        """Dispatch one host frame already decoded (a dict): what dispatch does after
        decoding. A detached kernel's link calls it with the value it decoded."""
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
        if self.detached and not self._first_execute(frame_id):
            return
        with self._cells_lock:
            self._finished.take(frame_id)  # the newest cell of this id has not ended
        timeout = frame.get("timeout_ms")
        if type(timeout) is not int or timeout <= 0:
            timeout = None
        self.post((frame_id, frame.get("code"), timeout))

    def _first_execute(self, frame_id):
        """Detached: whether cell ``frame_id`` is new (then it is live from now on). For
        a finished one its done goes out again."""
        with self._cells_lock:
            if frame_id in self._live_cells:
                return False
            done = self._done_frames.get(frame_id)
            long_ago = done is None and frame_id in self._done_long_ago
            if done is None and not long_ago:
                self._live_cells.add(frame_id)
                return True
        if done is not None:
            self.writer.write(done)
        else:
            self.writer.log("warning", "execute %r: the cell finished long ago; ignored" % (frame_id,))
        return False

    def _on_interrupt(self, frame_id, frame):
        with self._cells_lock:
            if self._interrupt_running(frame_id):
                pass
            elif frame_id not in self._finished:
                # Queued, or not arrived yet: cancelled when its turn comes.
                self.early_interrupts.add(frame_id)

    def _on_host_reply(self, frame_id, frame):
        self.host.reply(frame)

    def _on_job_run(self, frame_id, frame):
        self.jobs.run(frame_id, frame.get("command"), frame.get("stdout"), frame.get("stderr"))

    def _on_job_kill(self, frame_id, frame):
        self.jobs.kill(frame_id, frame.get("signal"))

    def _on_shutdown(self, frame_id, frame):
        threading.Thread(
            target=self.life.begin, args=("shutdown",), name="kennel-end", daemon=True
        ).start()

    def _on_call(self, frame_id, frame):
        self.remote().call(frame_id, frame.get("module"), frame.get("function"), frame.get("args"))

    def remote(self):
        """The @remote registry, made at its first use (it imports inspect and typing)."""
        registry = self._remote
        if registry is None:
            with self._remote_lock:
                if self._remote is None:
                    from kennel import _remote

                    self._remote = _remote.Registry(self)
                registry = self._remote
        return registry

    def call_done(self, call_id, outcome):
        """Write the done frame of @remote call ``call_id`` (any thread)."""
        self._done(call_id, outcome, cell=False)

    # Start.

    def start(self):
        for pipe in self.pipes:
            pipe.start()
        sys.stdout = _capture.StreamWriter(self, "stdout", 1)
        sys.stderr = _capture.StreamWriter(self, "stderr", 2)
        sys.stdin = open(os.devnull, "r")
        signal.signal(signal.SIGINT, self._on_sigint)
        _lifetime.SignalWatch(self.boot.signals, self._on_term).start()
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
        self.memory.start()
        threading.Thread(target=self.read_while_cells_run, name="kennel-reader", daemon=True).start()

    def _on_owner_death(self, reason):
        self.life.begin(reason)

    def _on_term(self):
        self.life.terminate("SIGTERM")


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
    if boot.link is not None:
        boot.link.start(kernel)
    try:
        _site(os.environ)
    except Exception as exc:
        kernel.writer.log("warning", "site-packages not loaded: %s: %s" % (type(exc).__name__, exc))
    kernel.serve_cells()


def _wake_pipe():
    r, w = os.pipe()
    os.set_blocking(r, False)
    os.set_blocking(w, False)
    return r, w


def _poke(fd):
    try:
        os.write(fd, b"x")
    except OSError:
        pass  # full: a wake is pending anyway


def _drain(fd):
    try:
        while os.read(fd, 512):
            pass
    except OSError:
        pass
