package wrapped

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/kennel-dev/kennel/images"
	"github.com/kennel-dev/kennel/internal/testneed"
	"github.com/kennel-dev/kennel/transports"
	"github.com/kennel-dev/kennel/transports/internal/kernelstart"
)

func specOf(dir string, env []string) transports.Spec {
	return transports.Spec{SessionID: "t", Dir: dir, Env: env}
}

// runProgram runs `python -I -S -c PROGRAM arg` with stdin and returns stdout, stderr
// and the exit code.
func runProgram(t testing.TB, python, program, arg string, stdin []byte) (string, string, int) {
	t.Helper()
	cmd := exec.Command(python, "-I", "-S", "-c", program, arg)
	cmd.Stdin = bytes.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatal(err)
		}
		code = ee.ExitCode()
	}
	return out.String(), errb.String(), code
}

// bootFile is a kennel._boot that reports the bundle hash it was given and the source
// of another module of the bundle (imported from memory).
const bootFile = `import os
def main():
    import kennel.extra
    os.write(1, ("booted %s %s\n" % (os.environ.get("KENNEL_KERNEL_BUNDLE"), kennel.extra.VALUE)).encode())
`

// The loader accepts exactly the bundles images makes: for generated bundles (names with
// non-ASCII, nested dirs, empty files) it computes images.Bundle.Hash, imports from memory
// and runs kennel._boot.main.
func TestLoaderAgreesWithImagesBundles(t *testing.T) {
	python := testneed.Python(t)
	block, err := kernelstart.Block{Dir: "/"}.Encode()
	if err != nil {
		t.Fatal(err)
	}
	program := kernelstart.Program(images.BootstrapProgram())
	rapid.Check(t, func(rt *rapid.T) {
		files := []images.File{
			{Path: "kennel/__init__.py", Data: nil},
			{Path: "kennel/_boot.py", Data: []byte(bootFile)},
		}
		value := rapid.IntRange(0, 1<<30).Draw(rt, "value")
		files = append(files, images.File{Path: "kennel/extra.py", Data: []byte("VALUE = " + itoa(value) + "\n")})
		names := rapid.SliceOfNDistinct(rapid.StringMatching(`(data|d\x{e9}j\x{e0}|x)/[a-z\x{4e2d}]{1,6}\.txt`), 0, 4, func(s string) string { return s }).Draw(rt, "names")
		for _, n := range names {
			files = append(files, images.File{Path: n, Data: []byte(rapid.String().Draw(rt, "data"))})
		}
		b, err := images.NewBundle(files)
		if err != nil {
			rt.Skip(err)
		}
		payload, err := b.BootstrapPayload()
		if err != nil {
			rt.Fatal(err)
		}
		out, stderr, code := runProgram(t, python, program, b.Hash(), append(block, payload...))
		if want := "booted " + b.Hash() + " " + itoa(value) + "\n"; code != 0 || out != want {
			rt.Fatalf("loader: exit %d, stdout %q, stderr %q; want %q", code, out, stderr, want)
		}
	})
}

// storedZip makes a zip of one file, compressed with method (zip.Store or zip.Deflate).
func storedZip(t testing.TB, name, data string, method uint16) []byte {
	var buf bytes.Buffer
	w := zip.NewWriter(&buf)
	fw, err := w.CreateHeader(&zip.FileHeader{Name: name, Method: method})
	if err != nil {
		t.Fatal(err)
	}
	_, _ = fw.Write([]byte(data))
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func lengthPrefixed(b []byte) []byte {
	out := binary.BigEndian.AppendUint32(nil, uint32(len(b)))
	return append(out, b...)
}

// A payload that is not the bundle of the hash in argv ends the kernel with status 2
// before any byte on stdout.
func TestLoaderRefusesBadPayloads(t *testing.T) {
	python := testneed.Python(t)
	b, err := images.Stub()
	if err != nil {
		t.Fatal(err)
	}
	good, err := b.BootstrapPayload()
	if err != nil {
		t.Fatal(err)
	}
	other, _ := images.NewBundle([]images.File{{Path: "kennel/__init__.py", Data: []byte("# other\n")}})
	otherPayload, _ := other.BootstrapPayload()
	z := good[4:]
	commented := append(append([]byte(nil), z...), 0) // a trailing byte: no end record at the end
	block, _ := kernelstart.Block{Dir: "/"}.Encode()
	for _, c := range []struct {
		name    string
		payload []byte
	}{
		{"empty", nil},
		{"short length", good[:2]},
		{"cut", good[:len(good)/2]},
		{"over the limit", binary.BigEndian.AppendUint32(nil, images.MaxBootstrapZip+1)},
		{"another bundle", otherPayload},
		{"not a zip", lengthPrefixed(bytes.Repeat([]byte("x"), 100))},
		{"trailing byte", lengthPrefixed(commented)},
		{"deflated", lengthPrefixed(storedZip(t, "kennel/__init__.py", strings.Repeat("a", 1000), zip.Deflate))},
		{"stored but another hash", lengthPrefixed(storedZip(t, "kennel/__init__.py", "", zip.Store))},
	} {
		out, stderr, code := runProgram(t, python, kernelstart.Program(images.BootstrapProgram()), b.Hash(), append(append([]byte(nil), block...), c.payload...))
		if code != 2 || out != "" || !strings.Contains(stderr, "kennel bootstrap:") {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want exit 2, no stdout, a message", c.name, code, out, stderr)
		}
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
