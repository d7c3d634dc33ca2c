package images

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
)

// The bootstrap compiles kennel._boot, the one module it runs before the hello, through
// exec (_quick_code): its code objects, nested ones too, must still be named by their
// place in the bundle, and no profile hook may be left behind; the modules imported
// later (kennel, kennel._kernel) are compiled as before, with the same names.
func TestBootstrapNamesQuickCode(t *testing.T) {
	t.Parallel()
	python := needPython(t)
	b, _ := stubDir(t)
	payload, err := b.BootstrapPayload()
	if err != nil {
		t.Fatal(err)
	}
	k := startKernel(t, kernelOpts{argv: b.BootstrapArgv(python), payload: payload})
	cell := `import sys
assert sys.modules["kennel._boot"].__spec__.parent == "kennel"
def _names(c):
    out = {c.co_filename}
    for k in c.co_consts:
        if hasattr(k, "co_filename"):
            out |= _names(k)
    return out
_b = sys.modules["kennel._boot"]
_got = set()
for _f in (_b.main, _b._write_all, _b._bundle_hash, kennel.HostError.__init__, sys.modules["kennel._kernel"].serve):
    _got |= _names(_f.__code__)
(sorted(_got), sys.getprofile())`
	root := "<kennel-bundle " + b.Hash()[:12] + ">/kennel/"
	want := fmt.Sprintf("(['%s__init__.py', '%s_boot.py', '%s_kernel.py'], None)", root, root, root)
	if got := k.result("c1", cell); got != want {
		t.Errorf("code names = %s, want %s", got, want)
	}
}

// quickCode itself: it runs nothing of the source, names every code object in it,
// leaves no profile hook, and gives None for source that does not compile.
func TestQuickCode(t *testing.T) {
	t.Parallel()
	python := needPython(t)
	program := strings.TrimSuffix(strings.TrimSpace(bootstrapProgram), "_bootstrap()") + `
def names(c):
    out = {c.co_filename}
    for k in c.co_consts:
        if hasattr(k, "co_filename"):
            out |= names(k)
    return out
src = b"import os\nos._exit(7)\ndef f():\n    def g():\n        return 1\n    return g\nclass C:\n    def m(self):\n        return lambda: 2\n"
code = _quick_code(src, "<b>/m.py")
print(sorted(names(code)), code.co_name, sys.getprofile())
g = {}
try:
    exec(_quick_code(b"def f():\n    raise ValueError\n", "<b>/n.py"), g)
    g["f"]()
except ValueError as exc:
    print(exc.__traceback__.tb_next.tb_frame.f_code.co_filename)
print(_quick_code(b"def (:\n", "<b>/bad.py"), sys.getprofile())
`
	out, err := exec.Command(python, "-I", "-S", "-c", program).CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	want := "['<b>/m.py'] <module> None\n<b>/n.py\nNone None\n"
	if string(out) != want {
		t.Errorf("got %q, want %q", out, want)
	}
}
