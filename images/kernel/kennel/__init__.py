"""kennel: what a cell running in a kennel kernel can call.

Inside a kernel the module is already in the cell namespace as ``kennel``::

    text = kennel.fs.read("notes.txt")          # a host request, answered by the host
    kennel.display({"text/markdown": "# done"})  # a rich value for the host to show

Everything here blocks the calling thread until the host answers; a cell waiting on the
host can be interrupted. Errors from the host arrive as :class:`HostError` with a stable
``code``; a payload over 16 MiB raises :class:`PayloadTooLarge` before anything is sent.

Importing this module is cheap (no json, no threading): the kernel imports it before it
has said hello.
"""

__all__ = [
    "HostError",
    "PayloadTooLarge",
    "PAYLOAD_LIMIT",
    "host_request",
    "display",
    "remote",
    "fs",
    "jobs",
]

# A display or host_request frame larger than this is refused before it is written.
PAYLOAD_LIMIT = 16 << 20

# The running kernel (kennel._kernel.Kernel), set once at start; None outside a kernel.
_rt = None


class HostError(Exception):
    """The host answered a request with an error.

    ``code`` is the stable class of the error (``not_found``, ``outside``, ``read_only``,
    ``invalid``, ``too_large``, ``unserved``, ``closed``, ``unknown``, ...); ``message`` is for people
    and never to be matched. ``reason`` and ``version`` are set for path refusals.
    """

    def __init__(self, code, message="", reason=None, version=None):
        super().__init__(code, message)
        self.code = code
        self.message = message
        self.reason = reason
        self.version = version

    def __str__(self):
        text = "%s: %s" % (self.code, self.message) if self.message else str(self.code)
        if self.reason:
            text += " (%s)" % (self.reason,)
        return text


class PayloadTooLarge(Exception):
    """A display or host request was larger than PAYLOAD_LIMIT; nothing was sent."""

    def __init__(self, size, limit=PAYLOAD_LIMIT, what="payload"):
        super().__init__(size, limit, what)
        self.size = size
        self.limit = limit
        self.what = what

    def __str__(self):
        return "%s of %d bytes is over the limit of %d bytes" % (self.what, self.size, self.limit)


def _runtime():
    if _rt is None:
        raise RuntimeError("kennel: not running inside a kennel kernel")
    return _rt


def host_request(type, /, **args):
    """Send host request ``type`` with ``args`` and return the host's result.

    Blocks until the host's reply. Raises HostError when the host answers with an error,
    PayloadTooLarge when the encoded request is over PAYLOAD_LIMIT (nothing is sent),
    TypeError or ValueError when ``args`` cannot be encoded as strict JSON.
    """
    return _runtime().host.call(type, args)


def display(data):
    """Show ``data``, a dict of MIME type to value, to the host (a ``display`` frame).

    Raises PayloadTooLarge when the encoded frame is over PAYLOAD_LIMIT (nothing is
    sent), TypeError or ValueError when ``data`` is not a dict or cannot be encoded.
    """
    return _runtime().display(data)


def remote(fn=None, *, name=None):
    """Offer ``fn`` to the host as a @remote function, called by keyword arguments::

        @kennel.remote
        def add(a: int, b: int = 1) -> int:
            "Add two numbers."
            return a + b

    Registration sends host request ``remote.register`` (name, module, qualified name,
    docstring, the JSON schema of its keyword arguments from its type hints) and returns
    ``fn`` unchanged once the host has it; a parameter that cannot be given by keyword
    (positional-only, ``*args``) is refused with TypeError. ``name`` names it instead of
    ``fn.__name__``. A host call runs a synchronous function on a thread of its own and an
    ``async def`` one on the kernel's event loop, on the main thread (it waits while a
    synchronous cell runs, and one that blocks without awaiting stops the kernel); its value
    must be strict JSON (NaN, Infinity fail the call as ``unencodable``). Outside a
    kernel, ``fn`` is returned as it is and nothing is recorded.
    """
    if fn is None:
        return lambda f: remote(f, name=name)
    if _rt is None:
        return fn
    return _rt.remote().register(fn, name)


def __getattr__(name):
    if name in ("fs", "jobs"):
        import importlib

        return importlib.import_module("kennel." + name)
    raise AttributeError("module 'kennel' has no attribute %r" % (name,))
