"""Host files: thin wrappers over the ``fs.*`` host requests.

Paths are the sandbox's paths; the host maps them onto its mounts and refuses paths
outside every mount with ``HostError`` code ``outside``. Relative paths are relative to
the cell's current directory, which every request sends as ``cwd``.

Example::

    kennel.fs.write("out/report.md", "# report\\n")
    kennel.fs.edit("out/report.md", edits=[("# report", "# Report")])
    hits = kennel.fs.grep("TODO", path="src", glob="*.py", limit=20)
"""

import os

import kennel


def _request(kind, **args):
    args = {key: value for key, value in args.items() if value is not None}
    args["cwd"] = os.getcwd()
    return kennel.host_request(kind, **args)


def _pairs(name, items, first, second):
    out = []
    for item in items or ():
        if isinstance(item, dict):
            item = (item.get(first), item.get(second))
        try:
            a, b = item
        except (TypeError, ValueError):
            raise TypeError("fs.edit: each of %s must be a pair (%s, %s)" % (name, first, second))
        if not isinstance(a, str) or not isinstance(b, str):
            raise TypeError("fs.edit: each of %s must be a pair of strings" % (name,))
        out.append({first: a, second: b})
    return out or None


def read(path, offset=0, limit=None):
    """Return the host's answer to ``fs.read`` of ``path`` from line ``offset``."""
    return _request("fs.read", path=path, offset=offset, limit=limit)


def write(path, content):
    """Write ``content`` (str) to ``path`` on the host, replacing it."""
    return _request("fs.write", path=path, content=content)


def edit(path=None, edits=(), moves=()):
    """Apply ``edits`` ((old, new) pairs, in order) to ``path``, then ``moves``
    ((src, dst) pairs: renames, in order). ``path`` may be None when there are no edits.
    Nothing changes unless every edit and move can be done."""
    return _request(
        "fs.edit",
        path=path,
        edits=_pairs("edits", edits, "old", "new"),
        moves=_pairs("moves", moves, "from", "to"),
    )


def grep(pattern, path=".", glob=None, limit=None):
    """Search files under ``path`` (optionally matching ``glob``) for regex ``pattern``."""
    return _request("fs.grep", pattern=pattern, path=path, glob=glob, limit=limit)


def glob(pattern, path="."):
    """List files under ``path`` matching the glob ``pattern``."""
    return _request("fs.glob", pattern=pattern, path=path)
