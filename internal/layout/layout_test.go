package layout

import (
	"encoding/json"
	"io"
	"os/exec"
	"path"
	"strings"
	"testing"
)

type pkg struct {
	ImportPath string
	Name       string
	Doc        string
	Deps       []string
	Imports    []string
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
				if strings.HasPrefix(d, api) {
					t.Errorf("%s depends on %s", p.ImportPath, d)
				}
			}
		}
	}
}
