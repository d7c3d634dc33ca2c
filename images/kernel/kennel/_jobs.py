"""Shell jobs: ``/bin/sh -c command`` in its own process group, output as raw bytes.

Each job has one thread that polls its stdout and stderr pipes and its pidfd (or, where
there is none, checks the process every 50 ms). Output goes out as ``job_output`` frames
with the exact bytes read (base64, never decoded). ``job_end`` goes out exactly once, when
the process has been reaped and either both pipes reached end of file, or the job was
killed and its process group is empty (a process outside the group may hold a pipe).

When ``job_run`` names ``stdout`` and ``stderr`` paths (files the host tails: regular files
the job appends to, or FIFOs the host reads), the job writes to them directly: no pipes,
no ``job_output`` frames, and ``job_end`` goes out once the shell has been reaped. If
either cannot be opened the job falls back to pipes and frames (with a ``log``).
"""

from binascii import b2a_base64 as _b64
import os
import select
import signal
import stat
import subprocess
import threading
import time

from kennel import _frames

_READ = 1 << 16

_TICK_MS = 50


def _group_alive(pgid):
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _open_fifos(job_id, stdout, stderr):
    """Open the job's output files for writing: ((stdout fd, stderr fd), None), or (None,
    why) when either is not a string or cannot be opened now. Each must be there already
    (the host made it) and be a regular file, opened to append, or a FIFO: one nobody
    reads is refused at once (ENXIO) rather than waited for. The fds are blocking once
    open."""
    fds = []
    try:
        for path in (stdout, stderr):
            if not isinstance(path, str):
                raise ValueError("path %r is not a string" % (path,))
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOFOLLOW)
            fds.append(fd)
            mode = os.fstat(fd).st_mode
            if not (stat.S_ISREG(mode) or stat.S_ISFIFO(mode)):
                raise ValueError("%s is neither a file nor a FIFO" % (path,))
            os.set_blocking(fd, True)
    except (OSError, ValueError) as exc:
        for fd in fds:
            os.close(fd)
        return None, "job_run %r: output through frames: %s" % (job_id, exc)
    return tuple(fds), None


class Job:
    __slots__ = (
        "id", "proc", "pgid", "command", "killed", "stopping", "ended", "finished",
        "wake_r", "wake_w", "thread", "pidfd",
    )

    def __init__(self, job_id, proc, command):
        self.id = job_id
        self.proc = proc
        self.pgid = proc.pid  # start_new_session: the job leads its own group
        self.command = command
        self.killed = False
        # Whether the kernel's end has TERMed the job (once, whichever end came first).
        self.stopping = False
        # ended: reaped and out of the table (under Jobs._lock); finished: its job_end
        # has been written (or its thread gave up).
        self.ended = False
        self.finished = threading.Event()
        self.thread = None
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_w, False)
        self.pidfd = None
        opener = getattr(os, "pidfd_open", None)
        if opener is not None:
            try:
                self.pidfd = opener(proc.pid)
            except OSError:
                self.pidfd = None

    def wake(self):
        try:
            os.write(self.wake_w, b"x")
        except OSError:
            pass


class Jobs:
    """The kernel's jobs by id. Safe for use by any thread."""

    def __init__(self, kernel):
        self._kernel = kernel
        self._lock = threading.Lock()
        self._jobs = {}
        self._closed = False

    def running(self):
        with self._lock:
            return {job_id: job.proc.pid for job_id, job in self._jobs.items()}

    def run(self, job_id, command, stdout=None, stderr=None):
        """Start job ``job_id`` (from a ``job_run`` frame); ``stdout`` and ``stderr``, when
        given, are the paths of the files (or FIFOs) the job writes to.

        The job is started and registered under the lock (so an end that begins meanwhile
        sees it); its frames are written after the lock is released, so a frame channel
        nobody reads never holds the lock."""
        writer = self._kernel.writer
        if not isinstance(command, str):
            writer.log("error", "job_run %r: command must be a string" % (job_id,))
            writer.frame("job_end", job_id, (("exit_code", None), ("signal", None)))
            return
        notes = []  # (level, message) to log once the lock is released
        failed = False
        job = None
        with self._lock:
            if self._closed:
                notes.append(("warning", "job_run %r: the kernel is shutting down" % (job_id,)))
            elif job_id in self._jobs:
                notes.append(("error", "job_run %r: a job with this id is running" % (job_id,)))
            else:
                job, failed = self._start(job_id, command, stdout, stderr, notes)
        for level, message in notes:
            writer.log(level, message)
        if failed:
            writer.frame("job_end", job_id, (("exit_code", None), ("signal", None)))
        if job is None:
            return
        try:
            writer.frame(
                "job_start",
                job_id,
                (("pid", job.proc.pid), ("pgid", job.pgid), ("command", command)),
            )
        finally:
            job.thread.start()  # whatever the write did: the job must end

    def _start(self, job_id, command, stdout, stderr, notes):
        """Start and register a job; the caller holds the lock. Returns (job or None,
        whether the start failed)."""
        fifos = None
        if stdout is not None or stderr is not None:
            fifos, why = _open_fifos(job_id, stdout, stderr)
            if why is not None:
                notes.append(("warning", why))
        out, err = fifos if fifos is not None else (subprocess.PIPE, subprocess.PIPE)
        try:
            proc = subprocess.Popen(
                ["/bin/sh", "-c", command],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
                close_fds=True,
                bufsize=0,
            )
            for stream in (proc.stdout, proc.stderr):
                if stream is not None:
                    _frames.widen_pipe(stream.fileno())
        except (OSError, ValueError) as exc:
            notes.append(("error", "job_run %r: cannot start: %s" % (job_id, exc)))
            return None, True
        finally:
            for fd in fifos or ():
                os.close(fd)
        job = Job(job_id, proc, command)
        job.thread = threading.Thread(target=self._serve, args=(job,), name="kennel-job", daemon=True)
        self._jobs[job_id] = job
        return job, False

    def kill(self, job_id, signum):
        """Signal job ``job_id``'s whole process group (from a ``job_kill`` frame)."""
        writer = self._kernel.writer
        if signum is None:
            signum = signal.SIGTERM
        if isinstance(signum, bool) or not isinstance(signum, int) or not 0 < signum < signal.NSIG:
            writer.log("error", "job_kill %r: bad signal %r" % (job_id, signum))
            return
        with self._lock:
            job = self._jobs.get(job_id)
        if job is None:
            writer.log("warning", "job_kill %r: no such job running" % (job_id,))
            return
        self._signal(job, signum)

    def _signal(self, job, signum, stop=False, quiet=False):
        """Signal job's group unless it has ended (its group may be gone, its pgid reused).
        ``stop``: the kernel's end TERMs it; it does so once, whichever end comes first.
        ``quiet``: a failure is not logged (a log frame could block on the channel)."""
        failure = None
        with self._lock:
            if job.ended or (stop and job.stopping):
                return
            if stop:
                job.stopping = True
            job.killed = True
            try:
                os.killpg(job.pgid, signum)
            except ProcessLookupError:
                pass
            except OSError as exc:
                failure = exc
            job.wake()
        if failure is not None and not quiet:
            self._kernel.writer.log("error", "job_kill %r: %s" % (job.id, failure))

    def stop_all(self, grace=1.0, settle=None, quiet=False):
        """Shut down: no new jobs; TERM every job's group, KILL what is left after
        ``grace`` seconds, then wait up to ``settle`` seconds (default ``grace``) for
        their job_end frames. Safe to call again while a call runs (a SIGTERM over a
        graceful end): a group is TERMed once, KILLed by either call.

        It waits on events only, never on a frame write or a lock one may hold; with
        ``quiet`` it writes no frame either, so it ends within ``grace + settle`` seconds
        whatever the frame channel does."""
        with self._lock:
            self._closed = True
            jobs = list(self._jobs.values())
        for job in jobs:
            self._signal(job, signal.SIGTERM, stop=True, quiet=quiet)
        _wait_finished(jobs, grace)
        left = [job for job in jobs if not job.finished.is_set()]
        for job in left:
            self._signal(job, signal.SIGKILL, quiet=quiet)
        _wait_finished(left, grace if settle is None else settle)

    def _serve(self, job):
        try:
            try:
                self._pump(job)
            except BaseException as exc:  # keep the one job_end promise
                self._kernel.writer.log("error", "job %r: %r" % (job.id, exc))
                try:
                    os.killpg(job.pgid, signal.SIGKILL)
                    job.proc.wait(1.0)
                except (OSError, subprocess.TimeoutExpired):
                    pass
            self._end(job, job.proc.returncode)
        finally:
            job.finished.set()

    def _pump(self, job):
        writer = self._kernel.writer
        proc = job.proc
        pipes = {
            stream.fileno(): name
            for stream, name in ((proc.stdout, "stdout"), (proc.stderr, "stderr"))
            if stream is not None
        }
        # Each pipe's frame head is built once; a chunk is then one base64 call and one
        # join: {"event":"job_output","id":ID,"name":NAME,"data":"<base64>"}
        heads = {
            fd: _frames.encode("job_output", job.id, (("name", name),))[:-2] + b',"data":"'
            for fd, name in pipes.items()
        }
        poller = select.poll()
        for fd in pipes:
            poller.register(fd, select.POLLIN)
        poller.register(job.wake_r, select.POLLIN)
        if job.pidfd is not None:
            poller.register(job.pidfd, select.POLLIN)
        reaped = False
        while True:
            if reaped and (not pipes or (job.killed and not _group_alive(job.pgid))):
                return
            timeout = None
            if not reaped and job.pidfd is None:
                timeout = _TICK_MS
            elif reaped and job.killed:
                timeout = _TICK_MS  # re-check the group while a pipe stays open
            for fd, _ in poller.poll(timeout):
                name = pipes.get(fd)
                if name is not None:
                    data = os.read(fd, _READ)
                    if data:
                        writer.write(b"".join((heads[fd], _b64(data, newline=False), b'"}\n')))
                    else:
                        poller.unregister(fd)
                        del pipes[fd]
                elif fd == job.wake_r:
                    os.read(job.wake_r, 512)
                elif fd == job.pidfd:
                    poller.unregister(fd)
                    proc.wait()
                    reaped = True
            if not reaped and job.pidfd is None and proc.poll() is not None:
                reaped = True

    def _end(self, job, code):
        if code is None:
            exit_code, signum = None, None
        elif code < 0:
            exit_code, signum = None, -code
        else:
            exit_code, signum = code, None
        with self._lock:
            job.ended = True
            self._jobs.pop(job.id, None)
        for stream in (job.proc.stdout, job.proc.stderr):
            if stream is None:
                continue
            try:
                stream.close()
            except OSError:
                pass
        for fd in (job.wake_r, job.wake_w, job.pidfd):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._kernel.writer.frame(
            "job_end", job.id, (("exit_code", exit_code), ("signal", signum))
        )


def _wait_finished(jobs, timeout):
    """Wait until every job in jobs has finished, or ``timeout`` seconds have passed."""
    deadline = time.monotonic() + timeout
    for job in jobs:
        if not job.finished.wait(max(0.0, deadline - time.monotonic())):
            return
