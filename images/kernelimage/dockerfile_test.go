package kernelimage_test

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/kennel-dev/kennel/images"
	"github.com/kennel-dev/kennel/images/kernelimage"
)

// The repository's Dockerfile.kernel is the embedded one, and its entrypoint runs the stub
// from StubDir the way images.KernelArgv does.
func TestDockerfileKernel(t *testing.T) {
	b, err := os.ReadFile("../../Dockerfile.kernel")
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != kernelimage.Dockerfile {
		t.Fatal("Dockerfile.kernel differs from images/kernelimage/kernel.Dockerfile: keep them the same")
	}
	var entry string
	for _, line := range strings.Split(kernelimage.Dockerfile, "\n") {
		if strings.HasPrefix(line, "ENTRYPOINT ") {
			entry = strings.TrimPrefix(line, "ENTRYPOINT ")
		}
	}
	var argv []string
	if err := json.Unmarshal([]byte(entry), &argv); err != nil {
		t.Fatalf("ENTRYPOINT %q: %v", entry, err)
	}
	want := images.KernelArgv(kernelimage.Python, kernelimage.StubDir)
	if strings.Join(argv, "\x00") != strings.Join(want, "\x00") {
		t.Fatalf("ENTRYPOINT %q, want %q", argv, want)
	}
	for _, must := range []string{"ARG BASE", "FROM ${BASE}", "USER 10001", "LABEL " + kernelimage.LabelBundle + "=${BUNDLE}", "COPY stub/ " + kernelimage.StubDir + "/"} {
		if !strings.Contains(kernelimage.Dockerfile, must) {
			t.Errorf("Dockerfile lacks %q", must)
		}
	}
}

// The build context holds the Dockerfile and every stub file under stub/, the same
// bytes every time.
func TestBuildContext(t *testing.T) {
	b, err := images.Stub()
	if err != nil {
		t.Fatal(err)
	}
	c1, err := kernelimage.BuildContext(b)
	if err != nil {
		t.Fatal(err)
	}
	c2, _ := kernelimage.BuildContext(b)
	if !bytes.Equal(c1, c2) {
		t.Fatal("build context differs between two calls")
	}
	files := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(c1))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			data, _ := io.ReadAll(tr)
			files[h.Name] = data
			if h.Mode != 0o644 {
				t.Errorf("%s mode %o", h.Name, h.Mode)
			}
		}
	}
	if string(files["Dockerfile"]) != kernelimage.Dockerfile {
		t.Error("no Dockerfile in the context")
	}
	for _, f := range b.Files() {
		if !bytes.Equal(files["stub/"+f.Path], f.Data) {
			t.Errorf("stub/%s missing or different", f.Path)
		}
	}
	if len(files) != len(b.Files())+1 {
		t.Errorf("%d files in the context, want %d", len(files), len(b.Files())+1)
	}
}

// A root file system build with a bad option is refused before anything runs.
func TestRootfsRefused(t *testing.T) {
	for _, o := range []kernelimage.RootfsOptions{{Suite: "../etc"}, {CacheDir: "relative"}} {
		if _, err := kernelimage.Rootfs(t.Context(), o); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
}
