# Stages a kennel stub bundle on a remote host. Run by the ssh transport's fixed staging
# command as `python -I -S -c PROGRAM`; its stdin holds the bundle hash on one line,
# then a tar stream of the bundle's files.
#
# The files are unpacked into a fresh temporary directory beside the target
# (~/.kennel-remote/.stage-*), checked against the hash (images.Bundle.Hash), and the
# directory is renamed to ~/.kennel-remote/<hash>: a bundle directory that exists is
# complete. A stream that ends early, a bad member or a bad hash removes the temporary
# directory and exits 2. A staging killed outright leaves only its temporary directory,
# which a later staging removes once it is an hour old. An existing bundle is kept and
# nothing is read.
import os
import sys


def _stage():
    import shutil
    import tarfile
    import tempfile
    import time
    import hashlib

    def fail(message):
        os.write(2, ("kennel stage: %s\n" % message).encode("utf-8", "replace"))
        os._exit(2)

    inp = sys.stdin.buffer
    want = inp.readline(128).strip().decode("ascii", "replace")
    if len(want) != 64 or any(c not in "0123456789abcdef" for c in want):
        fail("bad bundle hash")
    base = os.path.join(os.path.expanduser("~"), ".kennel-remote")
    os.makedirs(base, mode=0o700, exist_ok=True)
    final = os.path.join(base, want)
    if os.path.isdir(final):
        sys.stdout.write("present\n")
        return
    now = time.time()
    for name in os.listdir(base):
        if name.startswith(".stage-"):
            path = os.path.join(base, name)
            try:
                if now - os.lstat(path).st_mtime > 3600:
                    shutil.rmtree(path, ignore_errors=True)
            except OSError:
                pass
    tmp = tempfile.mkdtemp(prefix=".stage-" + want[:12] + "-", dir=base)
    try:
        files = {}
        try:
            with tarfile.open(fileobj=inp, mode="r|") as tf:
                for m in tf:
                    name = m.name
                    parts = name.split("/")
                    if name.startswith("/") or ".." in parts or "" in parts or "." in parts:
                        fail("bad member name %r" % name)
                    target = os.path.join(tmp, *parts)
                    if m.isdir():
                        os.makedirs(target, mode=0o700, exist_ok=True)
                        continue
                    if not m.isfile():
                        fail("member %r is not a regular file" % name)
                    data = tf.extractfile(m).read()
                    os.makedirs(os.path.dirname(target), mode=0o700, exist_ok=True)
                    with open(target, "xb") as f:
                        f.write(data)
                    files[name] = data
        except (tarfile.TarError, EOFError, OSError) as exc:
            fail("reading the bundle: %r" % (exc,))
        digest = hashlib.sha256()
        for name in sorted(files):
            path = name.encode("utf-8")
            digest.update(len(path).to_bytes(8, "big"))
            digest.update(path)
            digest.update(len(files[name]).to_bytes(8, "big"))
            digest.update(files[name])
        if digest.hexdigest() != want:
            fail("bundle hash %s does not match %s" % (digest.hexdigest(), want))
        os.chmod(tmp, 0o700)
        try:
            os.rename(tmp, final)
        except OSError:
            if not os.path.isdir(final):
                raise
            shutil.rmtree(tmp, ignore_errors=True)  # another staging won
            sys.stdout.write("present\n")
            return
        tmp = None
        sys.stdout.write("staged\n")
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


_stage()
