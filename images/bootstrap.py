# The bootstrap program of a kennel kernel (run as `python -I -S -c <this> <hash>`).
#
# It reads the stub bundle from stdin before any frame: a 4-byte big-endian length, then
# that many bytes of a zip archive. It checks the archive's files against the bundle
# hash in argv (sha256 over each file in path order: 8-byte big-endian length of the
# path, the path, 8-byte big-endian length of the content, the content), imports the
# stub from memory (nothing is written to disk) and runs it; the frames follow on the
# same stdin. A payload that is short, too large, not a zip, or of another hash ends the
# process with exit status 2 and a message on stderr, before any frame is written.
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


def _bootstrap():
    if len(sys.argv) != 2:
        _fail("usage: -c PROGRAM BUNDLE_HASH")
    want = sys.argv[1]
    size = int.from_bytes(_read_exactly(4), "big")
    if size > 64 << 20:
        _fail("bundle of %d bytes is over the limit of 64 MiB" % size)
    payload = _read_exactly(size)
    import hashlib
    import importlib.machinery
    import io
    import zipfile

    try:
        with zipfile.ZipFile(io.BytesIO(payload)) as archive:
            files = {}
            for info in archive.infolist():
                if not info.is_dir():
                    files[info.filename] = archive.read(info)
    except Exception as exc:
        _fail("bundle is not a readable zip: %s" % exc)
    digest = hashlib.sha256()
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
            spec = importlib.machinery.ModuleSpec(
                fullname, Finder, origin=root + "/" + key, is_package=package
            )
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
            source = files[origin[len(root) + 1 :]]
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
