package images

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand"
	"os/exec"
	"strings"
	"testing"
)

func TestZipHoldsTheBundle(t *testing.T) {
	t.Parallel()
	b, err := Stub()
	if err != nil {
		t.Fatal(err)
	}
	z1, err := b.Zip()
	if err != nil {
		t.Fatal(err)
	}
	z2, _ := b.Zip()
	if !bytes.Equal(z1, z2) {
		t.Error("Zip is not deterministic")
	}
	r, err := zip.NewReader(bytes.NewReader(z1), int64(len(z1)))
	if err != nil {
		t.Fatal(err)
	}
	var files []File
	for _, f := range r.File {
		rc, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(rc)
		rc.Close()
		files = append(files, File{Path: f.Name, Data: data})
	}
	if got := hashFiles(files); got != b.Hash() {
		t.Errorf("zip content hash %s, want %s", got, b.Hash())
	}
}

func TestBootstrapRunsTheStubFromStdin(t *testing.T) {
	t.Parallel()
	python := needPython(t)
	b, _ := stubDir(t)
	payload, err := b.BootstrapPayload()
	if err != nil {
		t.Fatal(err)
	}
	k := startKernel(t, kernelOpts{argv: b.BootstrapArgv(python), payload: payload})
	if got := k.hello.str("bundle"); got != b.Hash() {
		t.Errorf("hello bundle = %q, want %q", got, b.Hash())
	}
	if got := k.result("c1", "x = 6*7\nx"); got != "42" {
		t.Errorf("result = %s", got)
	}
	if got := k.result("c2", "kennel.__file__.startswith('<kennel-bundle ')"); got != "True" {
		t.Errorf("kennel loaded from %s", got)
	}
	_, done := k.execute("c3", "import kennel.fs\n1/0")
	e, _ := done.M["error"].(map[string]any)
	if tb, _ := e["traceback"].(string); e["ename"] != "ZeroDivisionError" || strings.Contains(tb, "kennel-bundle") {
		t.Errorf("error = %v", e)
	}
}

func TestBootstrapRefusesABadPayload(t *testing.T) {
	t.Parallel()
	python := needPython(t)
	b, _ := stubDir(t)
	good, err := b.BootstrapPayload()
	if err != nil {
		t.Fatal(err)
	}
	other, _ := NewBundle([]File{{Path: "kennel/__init__.py", Data: []byte("raise SystemExit(9)")}})
	otherPayload, _ := other.BootstrapPayload()
	flipped := append([]byte(nil), good...)
	flipped[len(flipped)/2] ^= 1
	huge := make([]byte, 4)
	binary.BigEndian.PutUint32(huge, 65<<20)
	notZip := append([]byte{0, 0, 0, 5}, "hello"...)
	cases := map[string]struct {
		payload []byte
		want    string
	}{
		"other bundle": {otherPayload, "does not match"},
		"flipped byte": {flipped, ""},
		"truncated":    {good[:len(good)-10], "stdin ended"},
		"empty":        {nil, "stdin ended"},
		"too large":    {huge, "over the limit"},
		"not a zip":    {notZip, "not a zip"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			argv := b.BootstrapArgv(python)
			cmd := exec.Command(argv[0], argv[1:]...)
			cmd.Stdin = bytes.NewReader(c.payload)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			ee, ok := err.(*exec.ExitError)
			if !ok || ee.ExitCode() != 2 {
				t.Fatalf("exit: %v, want status 2; stderr %s", err, stderr.String())
			}
			if stdout.Len() != 0 {
				t.Errorf("frames written: %q", stdout.String())
			}
			if !strings.HasPrefix(stderr.String(), "kennel bootstrap: ") || !strings.Contains(stderr.String(), c.want) {
				t.Errorf("stderr = %q, want %q", stderr.String(), c.want)
			}
		})
	}
}

// TestBootstrapHashAgreesWithGo: for generated bundles (paths with non-ASCII, empty
// files, bytes moved between path and content), the bootstrap accepts the zip under the
// Go hash and refuses it under any other.
func TestBootstrapHashAgreesWithGo(t *testing.T) {
	t.Parallel()
	python := needPython(t)
	rng := rand.New(rand.NewSource(1))
	bundles := [][]File{
		{},
		{{Path: "a", Data: nil}},
		{{Path: "ab", Data: []byte("c")}},
		{{Path: "a", Data: []byte("bc")}},
		{{Path: "dir/é.py", Data: []byte("x")}, {Path: "z", Data: []byte{0, 255}}},
	}
	for i := 0; i < 5; i++ {
		var files []File
		for j := rng.Intn(6); j >= 0; j-- {
			data := make([]byte, rng.Intn(2000))
			rng.Read(data)
			files = append(files, File{Path: fmt.Sprintf("d%d/f%d_%d.bin", rng.Intn(3), i, j), Data: data})
		}
		bundles = append(bundles, files)
	}
	seen := map[string]bool{}
	for i, files := range bundles {
		b, err := NewBundle(files)
		if err != nil {
			t.Fatal(err)
		}
		if seen[b.Hash()] {
			t.Errorf("bundle %d: hash collides with an earlier one", i)
		}
		seen[b.Hash()] = true
		payload, err := b.BootstrapPayload()
		if err != nil {
			t.Fatal(err)
		}
		run := func(hash string) string {
			argv := b.BootstrapArgv(python)
			argv[len(argv)-1] = hash
			cmd := exec.Command(argv[0], argv[1:]...)
			cmd.Stdin = bytes.NewReader(payload)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			cmd.Run()
			return stderr.String()
		}
		// The right hash passes the check (these bundles hold no stub, so the import
		// fails after it); a wrong one does not.
		if out := run(b.Hash()); strings.Contains(out, "does not match") || !strings.Contains(out, "No module named 'kennel") {
			t.Errorf("bundle %d under its own hash: %s", i, out)
		}
		wrong := []byte(b.Hash())
		wrong[0] ^= 1
		if out := run(string(wrong)); !strings.Contains(out, "does not match") {
			t.Errorf("bundle %d under a wrong hash: %s", i, out)
		}
	}
}
