package layout

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

type pkg struct {
	ImportPath                string
	Name                      string
	Doc                       string
	Dir                       string
	GoFiles                   []string // non-test sources
	TestGoFiles, XTestGoFiles []string
	Deps                      []string // of the non-test sources, transitively
	Imports                   []string // of the non-test sources
}

// listPackages runs `go list -json ./...` from the module root.
func listPackages(t *testing.T) []pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-json", "github.com/kennel-dev/kennel/...")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var pkgs []pkg
	dec := json.NewDecoder(out)
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	if len(pkgs) < 5 {
		t.Fatalf("go list found %d packages", len(pkgs))
	}
	return pkgs
}

func TestEveryPackageHasADoc(t *testing.T) {
	for _, p := range listPackages(t) {
		if strings.TrimSpace(p.Doc) == "" {
			t.Errorf("%s has no package doc (add a doc.go)", p.ImportPath)
		}
	}
}

func TestNoGrabBagPackages(t *testing.T) {
	for _, p := range listPackages(t) {
		switch path.Base(p.ImportPath) {
		case "util", "utils", "common", "helpers", "misc":
			t.Errorf("%s: name packages for what they provide", p.ImportPath)
		}
	}
}

// TestControllerKnowsNoConcreteTransport: the controller speaks to transports only through
// the transports.Transport seam.
func TestControllerKnowsNoConcreteTransport(t *testing.T) {
	const transports = "github.com/kennel-dev/kennel/transports/"
	for _, p := range listPackages(t) {
		if p.ImportPath != "github.com/kennel-dev/kennel/controller" && !strings.HasPrefix(p.ImportPath, "github.com/kennel-dev/kennel/controller/") {
			continue
		}
		for _, d := range p.Deps {
			if strings.HasPrefix(d, transports) {
				t.Errorf("%s depends on %s", p.ImportPath, d)
			}
			for _, api := range []string{"github.com/docker/", "github.com/moby/", "github.com/containerd/", "golang.org/x/crypto/ssh"} {
				// errdefs is the error vocabulary every package shares, not containerd's API.
				if strings.HasPrefix(d, api) && !strings.HasPrefix(d, "github.com/containerd/errdefs") {
					t.Errorf("%s depends on %s", p.ImportPath, d)
				}
			}
		}
	}
}

// inTree reports whether p is the package root or one below it.
func inTree(p pkg, root string) bool {
	return p.ImportPath == root || strings.HasPrefix(p.ImportPath, root+"/")
}

// TestControllerSignalsNoHostProcess: the controller signals no process and reads no
// /proc itself; a job's process group on the host is verified, probed and killed through
// the kernel's transports.HostGroups (the local transport's), so the controller's code
// holds no pid arithmetic a transport without host pids could trip on. It does not depend
// on internal/procfs (directly or through another package), and calls no signalling or
// process-group function of syscall, golang.org/x/sys/unix or os (it may use syscall for
// descriptors: the non-blocking write to a kernel's stdin).
func TestControllerSignalsNoHostProcess(t *testing.T) {
	const (
		controller = "github.com/kennel-dev/kennel/controller"
		procfs     = "github.com/kennel-dev/kennel/internal/procfs"
	)
	signalling := map[string][]string{
		"syscall":               {"Kill", "Tgkill", "Tkill", "Setpgid", "Getpgid", "Getpgrp"},
		"golang.org/x/sys/unix": {"Kill", "Tgkill", "Tkill", "PidfdSendSignal", "PidfdOpen", "Setpgid", "Getpgid"},
		"os":                    {"FindProcess"},
	}
	checked := 0
	for _, p := range listPackages(t) {
		if !inTree(p, controller) {
			continue
		}
		checked++
		for _, d := range p.Deps {
			if d == procfs {
				t.Errorf("%s depends on %s: read /proc through transports.HostGroups", p.ImportPath, d)
			}
		}
		for _, name := range p.GoFiles {
			for _, call := range selectorsOf(t, filepath.Join(p.Dir, name), signalling) {
				t.Errorf("%s/%s calls %s: signal host processes through transports.HostGroups", p.ImportPath, name, call)
			}
		}
	}
	if checked == 0 {
		t.Fatalf("no package %s found", controller)
	}
}

// selectorsOf parses the Go file at file and returns each use of a name in funcs[import
// path] through the file's import of that package, as "pkg.Name".
func selectorsOf(t *testing.T, file string, funcs map[string][]string) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	local := map[string]string{} // the file's name for an import -> its path
	for _, imp := range f.Imports {
		ipath, err := strconv.Unquote(imp.Path.Value)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := funcs[ipath]; !ok {
			continue
		}
		name := path.Base(ipath)
		if imp.Name != nil {
			name = imp.Name.Name
		}
		local[name] = ipath
	}
	var found []string
	ast.Inspect(f, func(n ast.Node) bool {
		sel, ok := n.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		x, ok := sel.X.(*ast.Ident)
		if !ok {
			return true
		}
		if ipath, ok := local[x.Name]; ok && slices.Contains(funcs[ipath], sel.Sel.Name) {
			found = append(found, x.Name+"."+sel.Sel.Name)
		}
		return true
	})
	return found
}

// TestImagesKnowsNoTransport: images (the stub bundle, the interpreter check, the kernel
// image) is what transports are built on; it depends on no transport, not even the
// transports seam, so a transport can import it without a cycle of meaning.
func TestImagesKnowsNoTransport(t *testing.T) {
	const (
		images     = "github.com/kennel-dev/kennel/images"
		transports = "github.com/kennel-dev/kennel/transports"
	)
	checked := 0
	for _, p := range listPackages(t) {
		if !inTree(p, images) {
			continue
		}
		checked++
		for _, d := range p.Deps {
			if d == transports || strings.HasPrefix(d, transports+"/") {
				t.Errorf("%s depends on %s", p.ImportPath, d)
			}
		}
	}
	if checked == 0 {
		t.Fatalf("no package %s found", images)
	}
}

// TestTestsSignalThroughTestproc: no test calls kill(2) itself; it goes through
// internal/testproc, which refuses the ids kill(2) reads as many processes (0: the
// caller's group, -1: everyone). A test that killed the group of a pid it had not learnt
// yet SIGKILLed `go test` and the CI job that started it.
func TestTestsSignalThroughTestproc(t *testing.T) {
	const testproc = "github.com/kennel-dev/kennel/internal/testproc"
	signalling := map[string][]string{
		"syscall":               {"Kill", "Tgkill", "Tkill"},
		"golang.org/x/sys/unix": {"Kill", "Tgkill", "Tkill", "PidfdSendSignal"},
	}
	checked := 0
	for _, p := range listPackages(t) {
		if p.ImportPath == testproc {
			continue
		}
		for _, name := range append(slices.Clone(p.TestGoFiles), p.XTestGoFiles...) {
			checked++
			for _, call := range selectorsOf(t, filepath.Join(p.Dir, name), signalling) {
				t.Errorf("%s/%s calls %s: signal through testproc.Kill or testproc.KillGroup", p.ImportPath, name, call)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no test file found")
	}
}
