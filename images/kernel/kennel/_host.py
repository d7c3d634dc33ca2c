"""Host requests: a blocking call from a cell, settled by the host's reply of its id.

A request is registered under a fresh id, written as a ``host_request`` frame, and its
caller waits on a lock the reply releases. A reply with status ``duplicate`` answers a
reused id (the gate's refusal), so it never settles the request in flight with that id:
it is dropped and logged. When the kernel shuts down every pending request fails with
HostError code ``closed``. When a controller other than the one that took them attaches,
every pending request fails with code ``unknown`` (abandon): the earlier controller may have
run it, and nothing runs it again.
"""

import itertools
import threading

import kennel
from kennel import _frames


class _Pending:
    __slots__ = ("lock", "status", "frame", "on_main")

    def __init__(self, on_main):
        self.lock = threading.Lock()
        self.lock.acquire()
        self.status = None
        self.frame = None
        self.on_main = on_main

    def settle(self, status, frame):
        self.status = status
        self.frame = frame
        self.lock.release()

    def outcome(self):
        frame = self.frame
        if self.status == "ok":
            return frame.get("result")
        error = frame.get("error")
        if not isinstance(error, dict):
            error = {}
        code = error.get("code")
        if not isinstance(code, str) or not code:
            code = "internal"
        message = error.get("message")
        if not isinstance(message, str):
            message = "" if message is None else str(message)
        if self.status not in ("error", "closed"):
            message = "reply with unknown status %r: %s" % (self.status, message)
        raise kennel.HostError(code, message, error.get("reason"), error.get("version"))


class Requests:
    """The kernel's host requests in flight. Safe for use by any thread."""

    def __init__(self, kernel):
        self._kernel = kernel
        self._lock = threading.Lock()
        self._pending = {}
        self._ids = itertools.count(1)
        self._closed = False

    def call(self, kind, args):
        """Send request ``kind`` with ``args`` and wait for its reply (see kennel.host_request)."""
        if not isinstance(kind, str) or not kind:
            raise TypeError("host_request: type must be a non-empty string")
        kernel = self._kernel
        request_id = "h%d" % next(self._ids)
        cell = kernel.owner()
        frame = _frames.encode(
            "host_request", request_id, (("type", kind), ("cell", cell), ("args", args))
        )
        if len(frame) > _frames.PAYLOAD_LIMIT:
            raise kennel.PayloadTooLarge(len(frame), _frames.PAYLOAD_LIMIT, "host_request " + kind)
        on_main = threading.get_ident() == kernel.main_ident
        pending = _Pending(on_main)
        with self._lock:
            if self._closed:
                raise kennel.HostError("closed", "the kernel is shutting down")
            self._pending[request_id] = pending
        try:
            if not kernel.writer.write(frame):
                raise kennel.HostError("closed", "the host is gone")
            # A KeyboardInterrupt for the cell ends either wait.
            if on_main:
                # The main thread reads host frames itself until its reply is in (the
                # reader thread may read it first: it then wakes the main thread).
                while pending.status is None:
                    kernel.pump_once()
            else:
                pending.lock.acquire()
            return pending.outcome()
        finally:
            self._pending.pop(request_id, None)

    def reply(self, frame):
        """Settle the request a ``host_reply`` frame answers, or drop the reply."""
        request_id = frame.get("id")
        status = frame.get("status")
        if status == "duplicate":
            self._kernel.writer.log(
                "warning", "host_reply: dropped a duplicate reply for request %r" % (request_id,)
            )
            return
        # Popped under the lock: close() takes every pending request under it, so a reply
        # racing the kernel's end settles its request once, by one of them.
        with self._lock:
            pending = self._pending.pop(request_id, None)
        if pending is None:
            self._kernel.writer.log(
                "warning", "host_reply: no request %r is waiting; reply dropped" % (request_id,)
            )
            return
        pending.settle(status, frame)
        if pending.on_main and threading.get_ident() != self._kernel.main_ident:
            self._kernel.wake_main()

    def close(self):
        """Fail every pending request with code ``closed``; refuse new ones."""
        with self._lock:
            self._closed = True
            pending = list(self._pending.items())
            self._pending.clear()
        for _, waiter in pending:
            waiter.settle("closed", {"error": {"code": "closed", "message": "the kernel is shutting down"}})
        self._kernel.wake_main()

    def abandon(self, code, message):
        """Fail every pending request with ``code`` and ``message`` (new ones are still
        taken); return the ids settled. The link does this when another controller
        attaches: the one that took these requests is gone and never answers them."""
        with self._lock:
            pending = list(self._pending.items())
            self._pending.clear()
        for _, waiter in pending:
            waiter.settle("error", {"error": {"code": code, "message": message}})
        if pending:
            self._kernel.wake_main()
        return [request_id for request_id, _ in pending]

    def waiting(self):
        """The number of requests waiting for a reply."""
        return len(self._pending)
