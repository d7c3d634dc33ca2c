"""Cell deadlines: a cell's own timeout interrupts it at its deadline, whoever waits.

An ``execute`` may carry ``timeout_ms``: the cell is interrupted (reason ``timeout``)
once that many milliseconds have passed since it started, also after the host's wait
for it ended (a backgrounded cell). The timer runs on a thread of its own, outside the
event loop, so a synchronous cell that holds the loop cannot hold its deadline back.
One thread serves every deadline; it starts with the first.
"""

import heapq
import threading
import time

TIMEOUT = "timeout"


class Deadlines:
    """Calls ``fire(cell_id, timeout_ms)`` once a cell's deadline passes, unless the cell
    was cancelled first. Safe for any thread."""

    def __init__(self, fire):
        self._fire = fire
        self._cond = threading.Condition()
        self._heap = []  # (deadline, seq, cell id, timeout ms)
        self._live = {}  # cell id -> seq of its deadline
        self._seq = 0
        self._thread = None

    def add(self, cell_id, timeout_ms):
        with self._cond:
            self._seq += 1
            self._live[cell_id] = self._seq
            heapq.heappush(self._heap, (time.monotonic() + timeout_ms / 1000.0, self._seq, cell_id, timeout_ms))
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="kennel-deadlines", daemon=True)
                self._thread.start()
            self._cond.notify()

    def cancel(self, cell_id):
        if not self._live:
            return
        with self._cond:
            self._live.pop(cell_id, None)

    def _loop(self):
        cond = self._cond
        heap = self._heap
        while True:
            with cond:
                while True:
                    while heap and self._live.get(heap[0][2]) != heap[0][1]:
                        heapq.heappop(heap)  # cancelled, or replaced
                    if not heap:
                        cond.wait()
                        continue
                    wait = heap[0][0] - time.monotonic()
                    if wait <= 0:
                        _, _, cell_id, timeout_ms = heapq.heappop(heap)
                        del self._live[cell_id]
                        break
                    cond.wait(wait)
            try:
                self._fire(cell_id, timeout_ms)
            except Exception:
                pass  # the thread serves the next deadlines whatever one did
