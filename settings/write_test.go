package settings

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"pgregory.net/rapid"
)

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func TestSetChangesOneKeyAndKeepsTheRest(t *testing.T) {
	e := newEnv(t)
	const before = `{
  "zeta": {"unknown": [1, 2, {"deep": null}]},
  "logLevel": 7,
  "kernelTransport": {"argvPrefix": ["docker", "exec", "-i", "box"], "futureField": "x"},
  "alpha": "<&>"
}`
	writeFile(t, e.globalFile(), before)
	d := Doc{Path: e.globalFile()}
	if err := d.Set(ctxT(t), "kernelTransport.python", json.RawMessage(`"/opt/venv/bin/python"`)); err != nil {
		t.Fatal(err)
	}
	if err := d.Set(ctxT(t), "truncation", json.RawMessage(`{"bytes": 4096}`)); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(e.globalFile())
	if err != nil {
		t.Fatal(err)
	}
	const want = `{
  "zeta": {
    "unknown": [
      1,
      2,
      {
        "deep": null
      }
    ]
  },
  "logLevel": 7,
  "kernelTransport": {
    "argvPrefix": [
      "docker",
      "exec",
      "-i",
      "box"
    ],
    "futureField": "x",
    "python": "/opt/venv/bin/python"
  },
  "alpha": "<&>",
  "truncation": {
    "bytes": 4096
  }
}
`
	if string(got) != want {
		t.Errorf("document:\n%s\nwant:\n%s", got, want)
	}
	if err := d.Unset(ctxT(t), "kernelTransport.futureField"); err != nil {
		t.Fatal(err)
	}
	if err := d.Unset(ctxT(t), "logLevel"); err != nil {
		t.Fatal(err)
	}
	r, _ := Load(LoadOptions{GlobalDir: e.global})
	if got := problemsOf(e, r); strings.Join(got, ",") != "global /alpha undeclared,global /zeta undeclared" {
		t.Errorf("problems after unsets: %q", got)
	}
}

// Writing keeps every other top-level key byte for byte, whatever the document holds.
func TestSetKeepsEveryOtherKey(t *testing.T) {
	e := newEnv(t)
	value := rapid.OneOf(
		rapid.Just(`null`), rapid.Just(`true`), rapid.Just(`"text"`), rapid.Just(`-1.5e3`),
		rapid.Just(`[1, "x", {"y": []}]`), rapid.Just(`{"a": {"b": "c"}}`), rapid.Just(`"ünï\u0000"`))
	rapid.Check(t, func(rt *rapid.T) {
		keys := rapid.SliceOfNDistinct(rapid.SampledFrom([]string{"a", "b", "kernelTransport", "truncation",
			"logLevel", "trustedProjects", "zz", "x.y"}), 0, 6, func(s string) string { return s }).Draw(rt, "keys")
		var doc strings.Builder
		doc.WriteString("{")
		for i, k := range keys {
			if i > 0 {
				doc.WriteString(",")
			}
			doc.WriteString(strconv.Quote(k) + ":" + value.Draw(rt, k))
		}
		doc.WriteString("}")
		writeFile(t, e.globalFile(), doc.String())
		before, _ := parseNode([]byte(doc.String()))
		set := rapid.SampledFrom([]string{"logLevel", "truncation.lines", "kernelTransport.env"}).Draw(rt, "set")
		val := map[string]string{"logLevel": `"debug"`, "truncation.lines": `5`, "kernelTransport.env": `["LANG"]`}[set]
		err := Doc{Path: e.globalFile()}.Set(ctxT(t), set, json.RawMessage(val))
		after, _, rerr := readDocument(e.globalFile())
		if rerr != nil {
			rt.Fatal(rerr)
		}
		top := strings.Split(set, ".")[0]
		for i, k := range before.keys {
			if k == top && err == nil {
				continue
			}
			if a := after.get(k); a == nil || mustJSON(a) != mustJSON(before.elems[i]) {
				rt.Fatalf("set %s (err %v) changed %s: %s -> %v", set, err, k, mustJSON(before.elems[i]), a)
			}
		}
		if err == nil {
			want, _ := parseNode([]byte(val))
			n := after
			for _, p := range strings.Split(set, ".") {
				n = n.get(p)
			}
			if n == nil || mustJSON(n) != mustJSON(want) {
				rt.Fatalf("set %s: the document holds %v", set, n)
			}
		} else if !errors.Is(err, ErrBadValue) {
			// Only a key whose current value is not an object on the way may refuse.
			rt.Fatalf("set %s: %v", set, err)
		}
	})
}

// A writer never writes over a file it could not read or parse: the bytes stay as they
// were, and the error says why.
func TestSetNeverRewritesAnUnreadableFile(t *testing.T) {
	for name, data := range map[string]string{
		"not JSON":       `{"logLevel": "debug",`,
		"an array":       `[]`,
		"a string":       `"x"`,
		"duplicate key":  `{"logLevel": "debug", "logLevel": "info"}`,
		"version 2":      `{"version": 2}`,
		"too big":        `{"x": "` + strings.Repeat("x", MaxFileSize) + `"}`,
		"not UTF-8 JSON": "{\"logLevel\": \"debug\"}\xff",
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			writeFile(t, e.globalFile(), data)
			fi, _ := os.Stat(e.globalFile())
			err := Doc{Path: e.globalFile()}.Set(ctxT(t), "logLevel", json.RawMessage(`"info"`))
			if !errors.Is(err, ErrUnreadable) {
				t.Fatalf("Set over %s: %v, want ErrUnreadable", name, err)
			}
			got, _ := os.ReadFile(e.globalFile())
			fi2, _ := os.Stat(e.globalFile())
			if string(got) != data || !os.SameFile(fi, fi2) {
				t.Errorf("the unreadable file was rewritten")
			}
			if err := (Doc{Path: e.globalFile()}).Unset(ctxT(t), "logLevel"); !errors.Is(err, ErrUnreadable) {
				t.Errorf("Unset over %s: %v", name, err)
			}
		})
	}
	t.Run("a FIFO", func(t *testing.T) {
		e := newEnv(t)
		if err := os.MkdirAll(e.global, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Mkfifo(e.globalFile(), 0o600); err != nil {
			t.Fatal(err)
		}
		err := Doc{Path: e.globalFile()}.Set(ctxT(t), "logLevel", json.RawMessage(`"info"`))
		if fi, _ := os.Lstat(e.globalFile()); !errors.Is(err, ErrUnreadable) || fi.Mode()&os.ModeNamedPipe == 0 {
			t.Errorf("Set over a FIFO: %v, file now %v", err, fi.Mode())
		}
	})
}

func TestSetRefusesAndWritesNothing(t *testing.T) {
	e := newEnv(t)
	const doc = `{"kernelTransport": {"argvPrefix": ["a"]}, "logLevel": "info"}`
	for _, c := range []struct {
		name, key, value string
		project          bool
		want             error
		pointer          string
	}{
		{"undeclared", "colour", `"blue"`, false, ErrUndeclared, ""},
		{"version", "version", `1`, false, ErrUndeclared, ""},
		{"empty path element", "kernelTransport..python", `"x"`, false, ErrUndeclared, ""},
		{"global-only in a project", "trustedProjects", `["/x"]`, true, ErrScope, ""},
		{"wrong type", "logLevel", `3`, false, ErrBadValue, "/logLevel"},
		{"wrong leaf", "kernelTransport.argvPrefix", `["a", 1]`, false, ErrBadValue, "/kernelTransport/argvPrefix/1"},
		{"bad mount", "kernelTransport.pathMap", `[{"sandbox": "/w", "host": "rel"}]`, false, ErrBadValue, "/kernelTransport/pathMap/0/host"},
		{"undeclared leaf", "kernelTransport.colour", `"x"`, false, ErrUndeclared, "/kernelTransport/colour"},
		{"a second transport", "kernelTransport.docker", `{}`, false, ErrBadValue, "/kernelTransport"},
		{"loosening docker", "kernelTransport", `{"docker": {"network": "host"}}`, false, ErrBadValue, "/kernelTransport/docker/network"},
		{"not JSON", "logLevel", `{`, false, ErrBadValue, ""},
		{"through a non-object", "logLevel.x", `1`, false, ErrBadValue, ""},
		{"limit not a whole number", "truncation.bytes", `1.5`, false, ErrBadValue, "/truncation/bytes"},
	} {
		file := e.globalFile()
		if c.project {
			file = e.projectFile()
		}
		writeFile(t, file, doc)
		err := Doc{Path: file, Project: c.project}.Set(ctxT(t), c.key, json.RawMessage(c.value))
		if c.key == "colour" {
			// the same through Unset
			if err2 := (Doc{Path: file}).Unset(ctxT(t), c.key); !errors.Is(err2, ErrUndeclared) {
				t.Errorf("unset %s: %v", c.key, err2)
			}
		}
		if !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
		var p *Problem
		if c.pointer != "" && (!errors.As(err, &p) || p.Pointer != c.pointer) {
			t.Errorf("%s: %v does not name %s", c.name, err, c.pointer)
		}
		if got, _ := os.ReadFile(file); string(got) != doc {
			t.Errorf("%s: the file changed to %s", c.name, got)
		}
	}
}

func TestSetRefusesSymlinks(t *testing.T) {
	e := newEnv(t)
	target := filepath.Join(t.TempDir(), "real.json")
	writeFile(t, target, `{}`)
	if err := os.MkdirAll(e.global, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, e.globalFile()); err != nil {
		t.Fatal(err)
	}
	if err := (Doc{Path: e.globalFile()}).Set(ctxT(t), "logLevel", json.RawMessage(`"info"`)); !errors.Is(err, ErrUnreadable) {
		t.Errorf("Set through a symlinked file: %v", err)
	}
	// A project whose .kennel is a symlink (to the global dir, say) is not written.
	if err := os.Symlink(e.global, filepath.Join(e.project, ProjectDirName)); err != nil {
		t.Fatal(err)
	}
	d, _ := ProjectDoc(e.project)
	if err := d.Set(ctxT(t), "logLevel", json.RawMessage(`"info"`)); !errors.Is(err, ErrUnreadable) {
		t.Errorf("Set through a symlinked .kennel: %v", err)
	}
	if got, _ := os.ReadFile(target); string(got) != `{}` {
		t.Errorf("the symlink's target changed: %s", got)
	}
}

func TestSetMakesPrivateFilesAndDirs(t *testing.T) {
	e := newEnv(t)
	d, _ := ProjectDoc(e.project)
	if err := d.Set(ctxT(t), "logLevel", ParseValue("debug")); err != nil {
		t.Fatal(err)
	}
	g := Doc{Path: filepath.Join(e.global, "nested", FileName)}
	if err := g.Set(ctxT(t), "logLevel", ParseValue("debug")); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]os.FileMode{
		d.Path: 0o600, filepath.Dir(d.Path): 0o700,
		g.Path: 0o600, filepath.Dir(g.Path): 0o700, e.global: 0o700,
	} {
		fi, err := os.Stat(path)
		if err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: %v, %v; want mode %v", path, fi.Mode().Perm(), err, want)
		}
	}
	// No temporary file is left beside it.
	ents, _ := os.ReadDir(filepath.Dir(d.Path))
	for _, ent := range ents {
		if strings.Contains(ent.Name(), ".tmp-") {
			t.Errorf("left %s", ent.Name())
		}
	}
}

// Two writers at once, as separate processes (the test binary re-executed) and as
// goroutines with their own lock descriptors: every set of each lands.
func TestConcurrentSetsAllLand(t *testing.T) {
	e := newEnv(t)
	defer withFreeformKey()()
	writeFile(t, e.globalFile(), `{"logLevel": "info", "testFreeform": {}}`)
	const n = 15
	var procs []*exec.Cmd
	var outs []*bytes.Buffer
	for _, prefix := range []string{"p1_", "p2_"} {
		spec, _ := json.Marshal(writerSpec{File: e.globalFile(), Prefix: prefix, N: n})
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), helperEnv+"="+string(spec))
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		procs = append(procs, cmd)
		outs = append(outs, &out)
	}
	var wg sync.WaitGroup
	for _, prefix := range []string{"g1_", "g2_"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := Doc{Path: e.globalFile()}
			for i := range n {
				if err := d.Set(ctxT(t), freeformKey.ID+"."+prefix+strconv.Itoa(i), json.RawMessage(strconv.Itoa(i))); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	for i, cmd := range procs {
		if err := cmd.Wait(); err != nil {
			t.Errorf("writer process %d: %v: %s", i, err, outs[i])
		}
	}
	r, _ := Load(LoadOptions{GlobalDir: e.global})
	raw, err := os.ReadFile(e.globalFile())
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Freeform map[string]int `json:"testFreeform"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	for _, prefix := range []string{"p1_", "p2_", "g1_", "g2_"} {
		for i := range n {
			if v, ok := doc.Freeform[prefix+strconv.Itoa(i)]; !ok || v != i {
				t.Errorf("set %s%d lost", prefix, i)
			}
		}
	}
	if r.Settings.LogLevel != "info" || len(r.Problems) != 0 {
		t.Errorf("logLevel %q, problems %v", r.Settings.LogLevel, r.Problems)
	}
}

// A writer waiting for the lock gives up when its context ends, and writes nothing.
func TestSetWaitsForTheLockWithinItsContext(t *testing.T) {
	e := newEnv(t)
	writeFile(t, e.globalFile(), `{}`)
	unlock, err := lockFile(ctxT(t), e.globalFile()+".lock")
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := (Doc{Path: e.globalFile()}).Set(ctx, "logLevel", ParseValue("info")); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Set under a held lock: %v", err)
	}
	if got, _ := os.ReadFile(e.globalFile()); string(got) != `{}` {
		t.Errorf("wrote %s", got)
	}
}

func TestParseValue(t *testing.T) {
	for in, want := range map[string]string{
		"debug": `"debug"`, `"debug"`: `"debug"`, "12": "12", "true": "true", `["a"]`: `["a"]`,
		"off": `"off"`, "": `""`, " ": `" "`, `{"a":1}`: `{"a":1}`, "a b": `"a b"`, "[1,": `"[1,"`,
		"/usr/bin/python3": `"/usr/bin/python3"`,
	} {
		if got := string(ParseValue(in)); got != want {
			t.Errorf("ParseValue(%q) = %s, want %s", in, got, want)
		}
	}
}
