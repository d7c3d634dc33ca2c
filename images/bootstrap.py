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
#
# Before the stub's hello it compiles only this program and kennel/_boot.py (through exec,
# see _quick_code); the importer of the other modules is compiled on its first use, when
# _boot's main imports the rest of the stub after its hello. Every kernel start compiles
# this program, so what runs only after the hello is kept out of it.
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


# The files of a stored (uncompressed) zip without a comment, read from its central
# directory (le reads an n-byte little-endian number at an offset). Anything else, a bad
# offset or name too, is not the zip the host sends.
def _members(payload):
    le = lambda at, n=2: int.from_bytes(payload[at:at + n], "little")
    end = len(payload) - 22
    if end < 0 or payload[end:end + 4] != b"PK\x05\x06":
        _fail("bundle is not a zip without comment")
    count, at = le(end + 10), le(end + 16, 4)
    files = {}
    try:
        for _ in range(count):
            if at + 46 > end or payload[at:at + 4] != b"PK\x01\x02" or le(at + 10) != 0:
                _fail("bundle member is not stored")
            size, name_len, local = le(at + 20, 4), le(at + 28), le(at + 42, 4)
            name = payload[at + 46:at + 46 + name_len].decode("utf-8")
            at += 46 + name_len + le(at + 30) + le(at + 32)
            if payload[local:local + 4] != b"PK\x03\x04":
                _fail("bundle member header missing")
            start = local + 30 + le(local + 26) + le(local + 28)
            if start + size > end:
                _fail("bundle member overruns")
            if not name.endswith("/"):
                files[name] = payload[start:start + size]
    except Exception as exc:
        _fail("bundle is not a readable zip: %r" % (exc,))
    return files


class _Compiled(BaseException):
    pass


# The code object of module source, named origin (and every code object in it), or None
# to leave it to compile(). The first compile() of a process builds the ast module's
# types (0.6 ms, before the hello); exec() of a string does not. So exec compiles it,
# the profile hook takes the module's code at its call event, before any of it runs,
# and _imp._fix_co_filename names it, as importlib does for bytecode. Only for what runs
# before the stub's main: no thread and no profiler exists yet.
def _quick_code(source, origin):
    got = []

    def grab(frame, event, arg):
        if event == "call":
            got.append(frame.f_code)
            raise _Compiled

    sys.setprofile(grab)
    try:
        exec(source, {})
    except _Compiled:
        pass
    except Exception:
        return None
    finally:
        sys.setprofile(None)
    if len(got) != 1 or got[0].co_name != "<module>":
        return None
    try:
        import _imp
        _imp._fix_co_filename(got[0], origin)
    except (ImportError, AttributeError):
        return None
    return got[0] if got[0].co_filename == origin else None


# The methods of _bootstrap's Finder, as source: the stub imports through them only after
# its hello, so they are compiled then, on first use, not with this program (0.3 ms before
# the hello). FILES (path to content), ROOT (the origin prefix), ModuleSpec and LOADER
# (the finder) are given. Blank and comment lines in here are dropped like the others.
_METHODS = ("find_spec", "create_module", "exec_module", "get_source")
_IMPORTER = """
def find_spec(fullname, path=None, target=None):
    rel = fullname.replace(".", "/")
    package = rel + "/__init__.py" in FILES
    key = rel + "/__init__.py" if package else rel + ".py"
    if key not in FILES:
        return None
    spec = ModuleSpec(fullname, LOADER, origin=ROOT + "/" + key, is_package=package)
    if package:
        spec.submodule_search_locations = [ROOT + "/" + rel]
    spec.has_location = True
    return spec
def create_module(spec):
    return None
def exec_module(module):
    origin = module.__spec__.origin
    exec(compile(FILES[origin[len(ROOT) + 1:]], origin, "exec", dont_inherit=True), module.__dict__)
def get_source(fullname):
    spec = find_spec(fullname)
    return spec and FILES[spec.origin[len(ROOT) + 1:]].decode("utf-8")
"""


def _bootstrap():
    if len(sys.argv) != 2:
        _fail("usage: -c PROGRAM BUNDLE_HASH")
    want = sys.argv[1]
    size = int.from_bytes(_read_exactly(4), "big")
    if size > MAX_BUNDLE:
        _fail("bundle of %d bytes is over the limit of %d" % (size, MAX_BUNDLE))
    files = _members(_read_exactly(size))
    # The interpreter's built-in sha256 module where it has one (_sha2 from 3.12 on).
    for name in ("_sha256", "_sha2", "hashlib"):
        try:
            digest = __import__(name).sha256()
            break
        except (ImportError, AttributeError):
            pass
    for name in sorted(files):
        path, content = name.encode("utf-8"), files[name]
        digest.update(len(path).to_bytes(8, "big") + path + len(content).to_bytes(8, "big"))
        digest.update(content)
    if digest.hexdigest() != want:
        _fail("bundle hash %s does not match %s" % (digest.hexdigest(), want))
    root = "<kennel-bundle %s>" % want[:12]
    # The spec type of every module, without importing importlib.machinery (0.5 ms).
    ModuleSpec = type(os.__spec__)
    if ModuleSpec.__name__ != "ModuleSpec":
        from importlib.machinery import ModuleSpec

    # The importer of the bundle's modules. Its methods (_IMPORTER) are compiled on the
    # first use of any of them, after the hello.
    class Finder:
        def __getattr__(self, name):
            if name not in _METHODS:
                raise AttributeError(name)
            scope = {"FILES": files, "ROOT": root, "ModuleSpec": ModuleSpec, "LOADER": finder}
            exec(_IMPORTER, scope)
            for method in _METHODS:
                setattr(Finder, method, staticmethod(scope[method]))
            return scope[name]

    finder = Finder()
    sys.meta_path.insert(0, finder)
    os.environ["KENNEL_KERNEL_BUNDLE"] = want
    # kennel._boot runs alone, before its package: its main writes the hello and only then
    # imports the rest of the stub (kennel/__init__.py first) through the finder. So _boot
    # is the one module compiled before the hello, by _quick_code.
    if "kennel/_boot.py" not in files:
        raise ModuleNotFoundError("No module named 'kennel._boot'", name="kennel._boot")
    spec = ModuleSpec("kennel._boot", finder, origin=root + "/kennel/_boot.py")
    spec.has_location = True
    source = files["kennel/_boot.py"]
    code = _quick_code(source, spec.origin) or compile(source, spec.origin, "exec", dont_inherit=True)
    boot = type(sys)(spec.name)
    boot.__spec__, boot.__loader__, boot.__package__, boot.__file__ = spec, finder, spec.parent, spec.origin
    sys.modules[spec.name] = boot
    exec(code, boot.__dict__)
    boot.main()


_bootstrap()
