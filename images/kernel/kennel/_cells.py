"""Cells: run code in the kernel's one namespace, IPython style.

A cell is parsed with ast; when its last statement is an expression, the statements
before it are executed and the expression evaluated, and the repr of its value (unless
None) is the cell's result. An exception ends the cell with its name, its text and its
traceback, from which the stub's own frames are removed.
"""

import ast
import collections
import linecache
import os
import traceback

# Text fields of an error are cut at this many characters.
_TEXT_LIMIT = 1 << 20
# Source lines of the newest cells are kept for tracebacks; older ones are forgotten.
_KEEP_SOURCES = 1000

OK = "ok"
ERROR = "error"
INTERRUPTED = "interrupted"

# compile() flag that allows await, async for and async with at a cell's top level, and
# the code flag of the coroutine such a cell compiles to.
_TOP_LEVEL_AWAIT = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
_CO_COROUTINE = 0x80


class Outcome:
    """How a cell ended: status, result (repr text or None) and error (dict or None);
    for a cell the kernel itself interrupted, reason (``memory``) and note (for people)."""

    __slots__ = ("status", "result", "error", "reason", "note")

    def __init__(self, status, result=None, error=None):
        self.status = status
        self.result = result
        self.error = error
        self.reason = None
        self.note = None

    def fields(self):
        fields = (("status", self.status), ("result", self.result), ("error", self.error))
        if self.reason is not None:
            fields += (("reason", self.reason), ("note", self.note or ""))
        return fields


def interrupted():
    """The outcome of a cell interrupted while it ran, or before it started."""
    return Outcome(INTERRUPTED)


class RecentIds:
    """A set of cell ids that keeps only the ``limit`` newest added (an id added again
    counts as new). Not locked: the caller serialises its use."""

    __slots__ = ("_ids", "_limit")

    def __init__(self, limit):
        self._ids = collections.OrderedDict()
        self._limit = limit

    def add(self, cell_id):
        ids = self._ids
        ids[cell_id] = None
        ids.move_to_end(cell_id)
        if len(ids) > self._limit:
            ids.popitem(last=False)

    def take(self, cell_id):
        """Remove ``cell_id``; return whether it was there."""
        if cell_id not in self._ids:
            return False
        del self._ids[cell_id]
        return True

    def __contains__(self, cell_id):
        return cell_id in self._ids

    def __len__(self):
        return len(self._ids)


def failure(ename, evalue, text=""):
    """An error outcome made by the stub (not from an exception of the cell)."""
    return Outcome(ERROR, None, {"ename": ename, "evalue": evalue, "traceback": text})


def _cut(text):
    if len(text) > _TEXT_LIMIT:
        return text[:_TEXT_LIMIT] + "\n... (truncated)"
    return text


class Executor:
    """Runs cells in ``namespace``; hides frames of files under ``stub_dir``."""

    def __init__(self, namespace, stub_dir):
        self.namespace = namespace
        self._stub_prefix = os.path.join(stub_dir, "")
        self._sources = collections.deque()  # filenames in linecache, oldest first

    def run(self, cell_id, code):
        """Run one cell and return its Outcome. Never raises, except KeyboardInterrupt
        arriving after the cell's own code has ended. A cell with top-level await runs
        to its end here too (on an event loop of its own); the kernel runs those as
        tasks instead (prepare, run_async)."""
        prepared = self.prepare(cell_id, code)
        if isinstance(prepared, Outcome):
            return prepared
        body, tail, is_async = prepared
        if is_async:
            import asyncio

            try:
                return asyncio.new_event_loop().run_until_complete(self.run_async(body, tail))
            except KeyboardInterrupt:
                return interrupted()
        return self.run_prepared(body, tail)

    def prepare(self, cell_id, code):
        """Compile a cell: (body, tail, is_async), body and tail code objects to exec and
        to eval (either may be None), is_async when either awaits at top level; or the
        Outcome of a cell that cannot run (not a string, a syntax error)."""
        if not isinstance(code, str):
            return failure("TypeError", "execute: code must be a string")
        filename = "<cell %s>" % (cell_id,)
        try:
            self._remember(filename, code)
            body, tail = self._compile(code, filename)
        except KeyboardInterrupt:
            return interrupted()
        except BaseException as exc:
            return self.error(exc)
        is_async = bool(
            (body is not None and body.co_flags & _CO_COROUTINE)
            or (tail is not None and tail.co_flags & _CO_COROUTINE)
        )
        return body, tail, is_async

    def run_prepared(self, body, tail):
        """Run a prepared cell that does not await; its Outcome (see run)."""
        try:
            if body is not None:
                exec(body, self.namespace)
            if tail is None:
                return Outcome(OK)
            return self._result(eval(tail, self.namespace))
        except KeyboardInterrupt:
            return interrupted()
        except BaseException as exc:
            return self.error(exc)

    async def run_async(self, body, tail):
        """Run a prepared cell that awaits at top level, as a coroutine; its Outcome. An
        interrupt (KeyboardInterrupt in its code, or the task's cancellation) ends it
        interrupted."""
        import asyncio

        try:
            if body is not None:
                value = eval(body, self.namespace)
                if body.co_flags & _CO_COROUTINE:
                    await value
            if tail is None:
                return Outcome(OK)
            value = eval(tail, self.namespace)
            if tail.co_flags & _CO_COROUTINE:
                value = await value
            return self._result(value)
        except (KeyboardInterrupt, asyncio.CancelledError):
            return interrupted()
        except BaseException as exc:
            return self.error(exc)

    def _result(self, value):
        if value is None:
            return Outcome(OK)
        self.namespace["_"] = value
        return Outcome(OK, repr(value))

    def _compile(self, code, filename):
        """Compile a cell to (statements, last expression): code objects to exec and to
        eval, either of them None. Top-level await is allowed: such a code object is a
        coroutine's (CO_COROUTINE), which eval returns unstarted."""
        flags = _TOP_LEVEL_AWAIT
        try:
            # Fast path: the whole cell is one expression.
            return None, compile(code, filename, "eval", flags, dont_inherit=True)
        except SyntaxError:
            pass
        tree = ast.parse(code, filename, "exec")
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            # Run the statements before the last expression, then evaluate it.
            last = tree.body.pop()
            body = compile(tree, filename, "exec", flags, dont_inherit=True) if tree.body else None
            tail = compile(ast.Expression(last.value), filename, "eval", flags, dont_inherit=True)
            return body, tail
        return compile(tree, filename, "exec", flags, dont_inherit=True), None

    def error(self, exc):
        """The error Outcome of exception ``exc``."""
        ename = type(exc).__name__
        try:
            evalue = str(exc)
        except BaseException:
            evalue = "<unprintable %s>" % ename
        try:
            report = traceback.TracebackException(type(exc), exc, exc.__traceback__)
            self._strip(report, set())
            text = "".join(report.format())
        except BaseException as inner:
            text = "%s: %s\n(traceback unavailable: %s)\n" % (ename, evalue, type(inner).__name__)
        return Outcome(ERROR, None, {"ename": ename, "evalue": _cut(evalue), "traceback": _cut(text)})

    def _strip(self, report, seen):
        if report is None or id(report) in seen:
            return
        seen.add(id(report))
        prefix = self._stub_prefix
        kept = [frame for frame in report.stack if not frame.filename.startswith(prefix)]
        if len(kept) != len(report.stack):
            report.stack = traceback.StackSummary.from_list(kept)
        self._strip(report.__cause__, seen)
        self._strip(report.__context__, seen)
        for sub in getattr(report, "exceptions", None) or ():
            self._strip(sub, seen)

    def _remember(self, filename, code):
        sources = self._sources
        if len(sources) >= _KEEP_SOURCES:
            linecache.cache.pop(sources.popleft(), None)
        sources.append(filename)
        linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
