# The bootstrap program of a kennel kernel, run as `python -I -S -c <this> <bundle hash>`
# (images.Bundle.BootstrapArgv; the wrapped transport runs it after its prelude).
#
# It reads the stub bundle from stdin before any frame, in the wire format of
# images.Bundle.BootstrapPayload (a 4-byte big-endian length, then a zip archive of stored
# files), checks its files against the hash in argv (sha256 over each file in path order:
# 8-byte big-endian length of the path, the path, 8-byte big-endian length of the content,
# the content: images.Bundle.Hash), imports the stub from memory (nothing is written to
# disk) and runs it; the frames follow on the same stdin. A payload that is short, too
# large, not such a zip, or of another hash ends the process with exit status 2 and a
# message on stderr, before any frame.
#
# It imports neither zipfile nor hashlib (about 25 ms of a kernel's start): the zip is
# read from its central directory by hand and the digest comes from the interpreter's
# built-in sha256 module where it has one. MAX_BUNDLE is replaced by images.MaxBootstrapZip.
import os
import sys


def _fail(message):
    os.write(2, ("kennel bootstrap: %s\n" % message).encode("utf-8", "replace"))
    os._exit(2)


def _read_exactly(n):
    parts = []
    while n > 0:
        data = os.read(0, min(n, 1 << 20))
        if not data:
            _fail("stdin ended %d bytes before the end of the bundle" % n)
        parts.append(data)
        n -= len(data)
    return b"".join(parts)


def _sha256():
    for name in ("_sha256", "_sha2"):
        try:
            return __import__(name).sha256()
        except (ImportError, AttributeError):
            pass
    import hashlib
    return hashlib.sha256()


def _members(payload):
    """The files of a stored (uncompressed) zip without a comment, from its central
    directory."""
    try:
        return _read_members(payload)
    except Exception as exc:  # a bad offset or name: not the zip the host sends
        _fail("bundle is not a readable zip: %r" % (exc,))


def _read_members(payload):
    u16 = lambda at: int.from_bytes(payload[at:at + 2], "little")
    u32 = lambda at: int.from_bytes(payload[at:at + 4], "little")
    end = len(payload) - 22
    if end < 0 or payload[end:end + 4] != b"PK\x05\x06":
        _fail("bundle is not a zip without comment")
    count, at = u16(end + 10), u32(end + 16)
    files = {}
    for _ in range(count):
        if at + 46 > end or payload[at:at + 4] != b"PK\x01\x02" or u16(at + 10) != 0:
            _fail("bundle member is not stored")
        size, name_len = u32(at + 20), u16(at + 28)
        local = u32(at + 42)
        name = payload[at + 46:at + 46 + name_len].decode("utf-8")
        at += 46 + name_len + u16(at + 30) + u16(at + 32)
        if payload[local:local + 4] != b"PK\x03\x04":
            _fail("bundle member header missing")
        start = local + 30 + u16(local + 26) + u16(local + 28)
        if start + size > end:
            _fail("bundle member overruns")
        if not name.endswith("/"):
            files[name] = payload[start:start + size]
    return files


def _bootstrap():
    if len(sys.argv) != 2:
        _fail("usage: -c PROGRAM BUNDLE_HASH")
    want = sys.argv[1]
    size = int.from_bytes(_read_exactly(4), "big")
    if size > MAX_BUNDLE:
        _fail("bundle of %d bytes is over the limit of %d" % (size, MAX_BUNDLE))
    files = _members(_read_exactly(size))
    digest = _sha256()
    for name in sorted(files):
        path = name.encode("utf-8")
        content = files[name]
        digest.update(len(path).to_bytes(8, "big"))
        digest.update(path)
        digest.update(len(content).to_bytes(8, "big"))
        digest.update(content)
    if digest.hexdigest() != want:
        _fail("bundle hash %s does not match %s" % (digest.hexdigest(), want))
    root = "<kennel-bundle %s>" % want[:12]
    # The spec type of every module, without importing importlib.machinery (0.5 ms).
    ModuleSpec = type(os.__spec__)
    if ModuleSpec.__name__ != "ModuleSpec":
        from importlib.machinery import ModuleSpec

    class Finder:
        """Imports modules of the bundle from memory."""

        @staticmethod
        def find_spec(fullname, path=None, target=None):
            rel = fullname.replace(".", "/")
            if rel + "/__init__.py" in files:
                key, package = rel + "/__init__.py", True
            elif rel + ".py" in files:
                key, package = rel + ".py", False
            else:
                return None
            spec = ModuleSpec(fullname, Finder, origin=root + "/" + key, is_package=package)
            if package:
                spec.submodule_search_locations = [root + "/" + rel]
            spec.has_location = True
            return spec

        @staticmethod
        def create_module(spec):
            return None

        @staticmethod
        def exec_module(module):
            origin = module.__spec__.origin
            source = files[origin[len(root) + 1:]]
            exec(compile(source, origin, "exec", dont_inherit=True), module.__dict__)

        @staticmethod
        def get_source(fullname):
            rel = fullname.replace(".", "/")
            for key in (rel + "/__init__.py", rel + ".py"):
                if key in files:
                    return files[key].decode("utf-8")
            return None

    sys.meta_path.insert(0, Finder)
    os.environ["KENNEL_KERNEL_BUNDLE"] = want
    from kennel._boot import main
    main()


_bootstrap()
