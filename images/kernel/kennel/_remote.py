"""@remote functions: kernel functions the host can call while cells run.

``kennel.remote`` records a function and announces it to the host with host request
``remote.register``: its name, module and qualified name, docstring, whether it is
``async``, and the JSON schema of its keyword arguments, made from its type hints. A
parameter that cannot be given by keyword (positional-only, ``*args``) is refused at
registration with TypeError, and nothing is sent.

The host calls one with frame ``call`` {module, function, args} on a lane of its own:
the call neither waits for a cell nor holds one. Each call gets exactly one ``done`` of
its id: status ``ok`` with ``result`` the JSON text of the value, or status ``error``
with the exception and ``reason``: ``unknown`` (no such function), ``failed`` (it
raised, or the arguments did not fit: the TypeError's text), ``unencodable`` (strict
JSON cannot carry the value: NaN, Infinity, an object JSON has no form for), or
``too_large`` (the done would be over 16 MiB). A call of ``registrations`` in module
``kennel`` answers the list of every registration's arguments: a controller that
reattached to the kernel learns its functions from it. What the function writes to sys.stdout
and sys.stderr is output of the call (stream frames of its id).

A synchronous function runs on a daemon thread of its own, so one that hangs costs that
thread and nothing else: the host answers its caller ``timeout`` and the kernel serves
the next cells and calls. An ``async def`` function runs on the kernel's event loop (one
main thread, the cells that await run on it too): it runs while no synchronous cell holds
the main thread, and one that blocks without awaiting stops the kernel until it returns
(cells and calls wait; the host's budget still answers its caller ``timeout``).
"""

import inspect
import json
import threading
import typing

from kennel import _capture, _cells, _frames

_encode = json.JSONEncoder(ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode

UNKNOWN = "unknown"
FAILED = "failed"
UNENCODABLE = "unencodable"
TOO_LARGE = "too_large"


def refuse_positional(fn):
    """Raise TypeError when a parameter of ``fn`` cannot be given by keyword."""
    sig = inspect.signature(fn)
    for p in sig.parameters.values():
        if p.kind is inspect.Parameter.POSITIONAL_ONLY:
            raise TypeError(
                "@remote %s: parameter %r is positional-only: a remote function takes "
                "keyword arguments only" % (fn.__qualname__, p.name)
            )
        if p.kind is inspect.Parameter.VAR_POSITIONAL:
            raise TypeError(
                "@remote %s: *%s cannot be given by keyword: a remote function takes "
                "keyword arguments only" % (fn.__qualname__, p.name)
            )
    return sig


def schema(fn):
    """The JSON schema of ``fn``'s keyword arguments, from its type hints (an object
    schema: one property per parameter, required when it has no default)."""
    sig = refuse_positional(fn)
    try:
        hints = typing.get_type_hints(fn)
    except Exception:
        hints = {}
    props = {}
    required = []
    additional = False
    for p in sig.parameters.values():
        hint = hints.get(p.name, inspect.Parameter.empty)
        if p.kind is inspect.Parameter.VAR_KEYWORD:
            additional = type_schema(hint) if hint is not inspect.Parameter.empty else True
            continue
        s = type_schema(hint)
        if p.default is inspect.Parameter.empty:
            required.append(p.name)
        else:
            try:
                _encode(p.default)
                s = dict(s, default=p.default)
            except (TypeError, ValueError):
                pass
        props[p.name] = s
    out = {"type": "object", "properties": props, "required": required}
    out["additionalProperties"] = additional
    return out


_SIMPLE = {
    int: {"type": "integer"},
    float: {"type": "number"},
    str: {"type": "string"},
    bool: {"type": "boolean"},
    bytes: {"type": "string"},
    type(None): {"type": "null"},
    list: {"type": "array"},
    tuple: {"type": "array"},
    set: {"type": "array", "uniqueItems": True},
    frozenset: {"type": "array", "uniqueItems": True},
    dict: {"type": "object"},
}


def type_schema(hint):
    """The JSON schema of one type hint; {} (anything) for one it has no form for."""
    if hint is inspect.Parameter.empty or hint is typing.Any or hint is object:
        return {}
    if hint is None:
        return {"type": "null"}
    simple = _SIMPLE.get(hint)
    if simple is not None:
        return dict(simple)
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is typing.Union or type(hint).__name__ == "UnionType":
        return {"anyOf": [type_schema(a) for a in args]}
    if origin is typing.Literal:
        return {"enum": [a for a in args if _encodable(a)]}
    if origin in (list, set, frozenset):
        s = {"type": "array"}
        if args:
            s["items"] = type_schema(args[0])
        if origin is not list:
            s["uniqueItems"] = True
        return s
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return {"type": "array", "items": type_schema(args[0])}
        if args:
            return {
                "type": "array",
                "prefixItems": [type_schema(a) for a in args],
                "minItems": len(args),
                "maxItems": len(args),
            }
        return {"type": "array"}
    if origin is dict:
        s = {"type": "object"}
        if len(args) == 2:
            s["additionalProperties"] = type_schema(args[1])
        return s
    if origin is not None:
        base = _SIMPLE.get(origin)
        if base is not None:
            return dict(base)
    return {}


def _encodable(value):
    try:
        _encode(value)
        return True
    except (TypeError, ValueError):
        return False


def _text(value):
    try:
        return str(value)
    except BaseException:
        return "<unprintable %s>" % type(value).__name__


class Registry:
    """The kernel's @remote functions and the calls in flight. Safe for any thread."""

    def __init__(self, kernel):
        self._kernel = kernel
        self._lock = threading.Lock()
        self._functions = {}  # (module, name) -> (function, is async, registration)

    # Registration (a cell's thread).

    def register(self, fn, name=None):
        if not callable(fn):
            raise TypeError("@remote: %r is not a function" % (fn,))
        name = name or getattr(fn, "__name__", None)
        if not isinstance(name, str) or not name:
            raise TypeError("@remote: a remote function needs a name")
        module = getattr(fn, "__module__", None) or "__main__"
        is_async = inspect.iscoroutinefunction(fn)
        args_schema = schema(fn)
        doc = inspect.getdoc(fn) or ""
        key = (module, name)
        registration = {
            "name": name,
            "module": module,
            "qualname": getattr(fn, "__qualname__", name),
            "doc": doc,
            "async": is_async,
            "schema": args_schema,
        }
        with self._lock:
            old = self._functions.get(key)
            self._functions[key] = (fn, is_async, registration)
        try:
            self._kernel.host.call("remote.register", registration)
        except BaseException:
            with self._lock:
                if old is None:
                    self._functions.pop(key, None)
                else:
                    self._functions[key] = old
            raise
        return fn

    # Calls (the thread that reads host frames: never blocks).

    def call(self, call_id, module, function, args):
        if args is None:
            args = {}
        if module == "kennel" and function == "registrations":
            # A controller that reattached asks for what an earlier one was told.
            with self._lock:
                regs = [entry[2] for entry in self._functions.values()]
            self._answer_value(call_id, regs)
            return
        with self._lock:
            entry = self._functions.get((module, function))
        if entry is None:
            self._answer_error(
                call_id, UNKNOWN, "RemoteUnknown",
                "no @remote function %s.%s in this kernel" % (module, function),
            )
            return
        fn, is_async, _ = entry
        if not isinstance(args, dict):
            self._answer_error(call_id, FAILED, "TypeError", "call arguments must be an object")
            return
        if is_async:
            self._on_loop(call_id, fn, args)
        else:
            threading.Thread(
                target=self._run_sync, args=(call_id, fn, args), name="kennel-call-" + call_id, daemon=True
            ).start()

    def _run_sync(self, call_id, fn, args):
        _capture.owner.set(call_id)
        try:
            value = fn(**args)
        except BaseException as exc:
            self._answer_raised(call_id, exc)
            return
        self._answer_value(call_id, value)

    def _on_loop(self, call_id, fn, args):
        try:
            coro = fn(**args)
        except BaseException as exc:
            self._answer_raised(call_id, exc)
            return

        async def run():
            _capture.owner.set(call_id)
            try:
                value = await coro
            except BaseException as exc:
                self._answer_raised(call_id, exc)
                return
            self._answer_value(call_id, value)

        self._kernel.run_on_loop(run())

    # Answers.

    def _answer_value(self, call_id, value):
        try:
            text = _encode(value)
        except (TypeError, ValueError) as exc:
            self._answer_error(
                call_id, UNENCODABLE, type(exc).__name__,
                "the result cannot be carried as strict JSON: %s" % _text(exc),
            )
            return
        if len(text) + 256 > _frames.PAYLOAD_LIMIT:
            self._answer_error(
                call_id, TOO_LARGE, "PayloadTooLarge",
                "result of %d bytes is over the limit of %d bytes" % (len(text), _frames.PAYLOAD_LIMIT),
            )
            return
        self._kernel.writer.write(_frames.encode_done_ok(call_id, text))

    def _answer_raised(self, call_id, exc):
        outcome = self._kernel.executor.error(exc)
        outcome.reason = FAILED
        outcome.note = ""
        self._kernel.call_done(call_id, outcome)

    def _answer_error(self, call_id, reason, ename, evalue):
        outcome = _cells.failure(ename, evalue)
        outcome.reason = reason
        outcome.note = ""
        self._kernel.call_done(call_id, outcome)
