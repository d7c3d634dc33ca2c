package settings

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/kennel-dev/kennel/internal/testneed"
	"github.com/kennel-dev/kennel/pathmap"
	"github.com/kennel-dev/kennel/sessionspec"
)

// The trust matrix: each kind of key (runs code, limit, global-only, plain) set by the
// global file, a trusted project and an untrusted project.
func TestTrustMatrix(t *testing.T) {
	const globalDoc = `{
  "kernelTransport": {"argvPrefix": ["global-wrapper"]},
  "truncation": {"bytes": 1000},
  "logLevel": "info"
}`
	const projectDoc = `{
  "kernelTransport": {"argvPrefix": ["project-wrapper"]},
  "truncation": "off",
  "trustedProjects": ["/elsewhere"],
  "logLevel": "debug"
}`
	for _, c := range []struct {
		name       string
		trusted    bool
		project    bool
		wantArgv   string
		wantTrunc  Truncation
		wantLevel  string
		wantTrust  int // len(TrustedProjects) in effect
		wantIssues []string
	}{
		{name: "global only", wantArgv: "global-wrapper", wantTrunc: Truncation{Bytes: 1000}, wantLevel: "info"},
		{name: "trusted project", project: true, trusted: true,
			wantArgv: "project-wrapper", wantTrunc: Truncation{Off: true}, wantLevel: "debug",
			wantIssues: []string{"project /trustedProjects withheld"}},
		{name: "untrusted project", project: true,
			wantArgv: "global-wrapper", wantTrunc: Truncation{Bytes: 1000}, wantLevel: "debug",
			wantIssues: []string{"project /kernelTransport withheld", "project /truncation withheld", "project /trustedProjects withheld"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			g := globalDoc
			if c.trusted {
				b, _ := json.Marshal(e.project)
				g = strings.Replace(g, "{\n", "{\n  \"trustedProjects\": ["+string(b)+"],\n", 1)
			}
			writeFile(t, e.globalFile(), g)
			if c.project {
				writeFile(t, e.projectFile(), projectDoc)
			}
			r := e.load(t)
			if r.Trusted != c.trusted {
				t.Errorf("Trusted %v, want %v", r.Trusted, c.trusted)
			}
			kt, err := r.KernelTransport()
			if err != nil || kt == nil || !slices.Equal(kt.ArgvPrefix, []string{c.wantArgv}) {
				t.Errorf("kernel transport %+v, %v; want argv [%s]", kt, err, c.wantArgv)
			}
			if r.Settings.Truncation == nil || *r.Settings.Truncation != c.wantTrunc {
				t.Errorf("truncation %+v, want %+v", r.Settings.Truncation, c.wantTrunc)
			}
			if r.Settings.LogLevel != c.wantLevel {
				t.Errorf("logLevel %q, want %q", r.Settings.LogLevel, c.wantLevel)
			}
			if c.trusted && !slices.Equal(r.Settings.TrustedProjects, []string{e.project}) {
				t.Errorf("trustedProjects %q: a project changed it", r.Settings.TrustedProjects)
			}
			if got := problemsOf(e, r); !slices.Equal(got, c.wantIssues) {
				t.Errorf("problems %q, want %q", got, c.wantIssues)
			}
			// Each withheld key's warning names the key and, for an untrusted project,
			// the fix.
			for _, p := range r.Problems {
				key := strings.TrimPrefix(p.Pointer, "/")
				if !strings.Contains(p.Error(), key) {
					t.Errorf("warning %q does not name %s", p, key)
				}
				if key != "trustedProjects" && !strings.Contains(p.Error(), "trustedProjects") {
					t.Errorf("warning %q does not name the fix", p)
				}
			}
		})
	}
}

// A project's kernelTransport replaces the global one whole: no field of the global
// entry survives under a project entry that omits it.
func TestProjectKernelTransportReplacesGlobalWhole(t *testing.T) {
	e := newEnv(t)
	b, _ := json.Marshal(e.project)
	writeFile(t, e.globalFile(), `{"trustedProjects": [`+string(b)+`], "kernelTransport": {
  "argvPrefix": ["docker", "exec", "-i", "box"], "python": "/opt/venv/bin/python",
  "pathMap": [{"sandbox": "/work", "host": "/home/me/project", "readOnly": true}], "env": ["LANG"]}}`)
	writeFile(t, e.projectFile(), `{"kernelTransport": {"argvPrefix": ["ssh", "-T", "host"]}}`)
	r := e.load(t)
	kt, err := r.KernelTransport()
	if err != nil {
		t.Fatal(err)
	}
	want := KernelTransport{ArgvPrefix: []string{"ssh", "-T", "host"}}
	gotJSON, _ := json.Marshal(kt)
	wantJSON, _ := json.Marshal(want)
	if string(gotJSON) != string(wantJSON) {
		t.Errorf("kernel transport %s, want %s", gotJSON, wantJSON)
	}
	if r.From["kernelTransport"] != e.projectFile() {
		t.Errorf("from %q", r.From["kernelTransport"])
	}
	// Without the project, the global unit applies whole.
	r, _ = Load(LoadOptions{GlobalDir: e.global})
	if kt := r.Settings.KernelTransport; kt.Python != "/opt/venv/bin/python" || len(kt.PathMap) != 1 ||
		kt.PathMap[0] != (pathmap.Mount{Sandbox: "/work", Host: "/home/me/project", ReadOnly: true}) || !slices.Equal(kt.Env, []string{"LANG"}) {
		t.Errorf("global unit %+v", kt)
	}
}

// Every bad leaf is named by its pointer and dropped alone; every good leaf applies.
func TestEveryBadLeafIsReported(t *testing.T) {
	e := newEnv(t)
	writeFile(t, e.globalFile(), `{
  "version": 1,
  "kernelTransport": {
    "argvPrefix": ["bwrap", 7, "--"],
    "python": 3,
    "pathMap": [
      {"sandbox": "/work", "host": "/srv/a"},
      {"sandbox": "/ro", "host": "/srv/b", "readOnly": "yes"},
      {"sandbox": "rel", "host": "/srv/c"},
      {"sandbox": "/x", "host": "/srv/d", "readonly": true},
      {"sandbox": "/y"},
      "not a mount"
    ],
    "env": ["LANG", "1BAD", 4, "HOME"],
    "docker": [],
    "color": "blue"
  },
  "trustedProjects": ["/p/one", "relative", null, "/p/two"],
  "truncation": {"bytes": -5, "lines": 10, "keep": "middle", "extra": 1},
  "logLevel": "loud",
  "unknownKey": {"anything": true},
  "a/b~c": 1
}`)
	r, err := Load(LoadOptions{GlobalDir: e.global})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"global /a~1b~0c undeclared",
		"global /kernelTransport bad", // argvPrefix and docker: two transports
		"global /kernelTransport/argvPrefix/1 bad",
		"global /kernelTransport/color undeclared",
		"global /kernelTransport/docker bad",
		"global /kernelTransport/env/1 bad",
		"global /kernelTransport/env/2 bad",
		"global /kernelTransport/pathMap/1/readOnly bad",
		"global /kernelTransport/pathMap/2/sandbox bad",
		"global /kernelTransport/pathMap/3/readonly undeclared",
		"global /kernelTransport/pathMap/4/host bad",
		"global /kernelTransport/pathMap/5 bad",
		"global /kernelTransport/python bad",
		"global /logLevel bad",
		"global /trustedProjects/1 bad",
		"global /trustedProjects/2 bad",
		"global /truncation/bytes bad",
		"global /truncation/extra undeclared",
		"global /truncation/keep bad",
		"global /unknownKey undeclared",
	}
	slices.Sort(want)
	if got := problemsOf(e, r); !slices.Equal(got, want) {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	s := r.Settings
	// The transport is one unit: with a bad field it applies nothing, and starts no kernel.
	if kt := s.KernelTransport; kt == nil || kt.ArgvPrefix != nil || kt.Python != "" || kt.Env != nil || kt.PathMap != nil {
		t.Errorf("kernel transport %+v: a unit with bad fields applies none of them", kt)
	}
	if kt, err := r.KernelTransport(); kt != nil || !errors.Is(err, ErrBadValue) || !errors.Is(err, sessionspec.ErrInvalid) {
		t.Errorf("a unit with bad fields: %+v, %v; want a refusal", kt, err)
	}
	if !slices.Equal(s.TrustedProjects, []string{"/p/one", "/p/two"}) {
		t.Errorf("trustedProjects %q", s.TrustedProjects)
	}
	if *s.Truncation != (Truncation{Lines: 10}) {
		t.Errorf("truncation %+v: a bad limit must leave the default, not none", s.Truncation)
	}
	if s.LogLevel != "" {
		t.Errorf("logLevel %q", s.LogLevel)
	}
}

// A file that cannot be read applies nothing, and the transport is then unknown: no
// kernel may start (not even a local one).
func TestUnreadableFilesApplyNothingAndFailClosed(t *testing.T) {
	for name, data := range map[string]string{
		"not JSON":      `{"logLevel": "debug",`,
		"an array":      `["logLevel"]`,
		"duplicate key": `{"logLevel": "debug", "logLevel": "info"}`,
		"nested dup":    `{"kernelTransport": {"argvPrefix": ["a"], "argvPrefix": ["b"]}}`,
		"version 2":     `{"version": 2, "logLevel": "debug"}`,
		"version text":  `{"version": "1", "logLevel": "debug"}`,
		"trailing data": `{"logLevel": "debug"} {}`,
		"too deep":      `{"kernelTransport": {"docker": ` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}}`,
		"too big":       `{"logLevel": "debug", "x": "` + strings.Repeat("x", MaxFileSize) + `"}`,
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			writeFile(t, e.globalFile(), data)
			r := e.load(t)
			if got := problemsOf(e, r); !slices.Equal(got, []string{"global  unreadable"}) {
				t.Errorf("problems %q", got)
			}
			if r.Settings.LogLevel != "" {
				t.Errorf("an unreadable file applied logLevel %q", r.Settings.LogLevel)
			}
			if kt, err := r.KernelTransport(); !errors.Is(err, ErrTransportUnknown) {
				t.Errorf("transport %+v, %v; want ErrTransportUnknown", kt, err)
			}
		})
	}
	t.Run("a directory", func(t *testing.T) {
		e := newEnv(t)
		if err := os.MkdirAll(e.globalFile(), 0o700); err != nil {
			t.Fatal(err)
		}
		if got := problemsOf(e, e.load(t)); !slices.Equal(got, []string{"global  unreadable"}) {
			t.Errorf("problems %q", got)
		}
	})
	t.Run("writable by every user", func(t *testing.T) {
		e := newEnv(t)
		writeFile(t, e.globalFile(), `{"logLevel": "debug"}`)
		if err := os.Chmod(e.globalFile(), 0o666); err != nil {
			t.Fatal(err)
		}
		if got := problemsOf(e, e.load(t)); !slices.Equal(got, []string{"global  unreadable"}) {
			t.Errorf("problems %q", got)
		}
	})
	t.Run("owned by another user", func(t *testing.T) {
		testneed.Root(t) // to give a file away
		e := newEnv(t)
		writeFile(t, e.globalFile(), `{"logLevel": "debug"}`)
		if err := os.Chown(e.globalFile(), 65534, 65534); err != nil {
			t.Fatal(err)
		}
		if got := problemsOf(e, e.load(t)); !slices.Equal(got, []string{"global  unreadable"}) {
			t.Errorf("problems %q", got)
		}
	})
	t.Run("an untrusted project's", func(t *testing.T) {
		e := newEnv(t)
		writeFile(t, e.projectFile(), `{`)
		r := e.load(t)
		if kt, err := r.KernelTransport(); kt != nil || err != nil {
			t.Errorf("an untrusted project cannot set the transport, so its broken file does not matter: %+v, %v", kt, err)
		}
	})
	t.Run("wrong-typed unit", func(t *testing.T) {
		e := newEnv(t)
		writeFile(t, e.globalFile(), `{"kernelTransport": "docker"}`)
		if kt, err := e.load(t).KernelTransport(); kt != nil || !errors.Is(err, ErrBadValue) {
			t.Errorf("transport %+v, %v; want a refusal, not a local kernel", kt, err)
		}
	})
}

func TestNoFilesIsLocalAndDefaults(t *testing.T) {
	e := newEnv(t)
	r := e.load(t)
	if len(r.Problems) != 0 || r.Trusted {
		t.Errorf("problems %v, trusted %v", r.Problems, r.Trusted)
	}
	if kt, err := r.KernelTransport(); kt != nil || err != nil {
		t.Errorf("transport %+v, %v; want local", kt, err)
	}
}

// A project named through a symlink is the same project.
func TestTrustComparesResolvedPaths(t *testing.T) {
	e := newEnv(t)
	link := filepath.Join(filepath.Dir(e.project), "link")
	if err := os.Symlink(e.project, link); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(link)
	writeFile(t, e.globalFile(), `{"trustedProjects": [`+string(b)+`]}`)
	if !e.load(t).Trusted {
		t.Error("a project trusted through a symlink to it is not trusted")
	}
	writeFile(t, e.globalFile(), `{"trustedProjects": ["`+filepath.Dir(e.project)+`"]}`)
	if e.load(t).Trusted {
		t.Error("trusting a parent directory trusts the project below it")
	}
}

func TestGlobalDirPrecedence(t *testing.T) {
	t.Setenv("HOME", "/home/someone")
	t.Setenv(EnvConfigDir, "")
	t.Setenv("XDG_CONFIG_HOME", "")
	check := func(want string) {
		t.Helper()
		if got, err := GlobalDir(); err != nil || got != want {
			t.Errorf("GlobalDir() = %q, %v; want %q", got, err, want)
		}
	}
	check("/home/someone/.config/kennel")
	t.Setenv("XDG_CONFIG_HOME", "relative")
	check("/home/someone/.config/kennel")
	t.Setenv("XDG_CONFIG_HOME", "/xdg")
	check("/xdg/kennel")
	t.Setenv(EnvConfigDir, "/kennel/config/")
	check("/kennel/config")
	t.Setenv(EnvConfigDir, "rel")
	if _, err := GlobalDir(); err == nil {
		t.Error("a relative KENNEL_CONFIG_DIR was accepted")
	}
}

func TestKeyTableIsConsistent(t *testing.T) {
	seen := map[string]bool{}
	for _, k := range keys {
		if seen[k.ID] || k.ID == versionKey || k.ID == "" || strings.Contains(k.ID, ".") {
			t.Errorf("key %q declared twice, reserved or not a plain name", k.ID)
		}
		seen[k.ID] = true
		// The default has the key's type: it decodes without a problem.
		root, err := parseNode(k.Default)
		if err != nil {
			t.Errorf("%s default: %v", k.ID, err)
			continue
		}
		if root.kind == kNull {
			continue
		}
		var s Settings
		lookup(k.ID).decode(root, "/"+k.ID, &s, func(ptr string, err error) {
			t.Errorf("%s default %s: %s %v", k.ID, k.Default, ptr, err)
		})
	}
	// Every exported field of Settings has a key, and no key lacks a field.
	st := reflect.TypeFor[Settings]()
	fields := 0
	for i := range st.NumField() {
		if st.Field(i).IsExported() {
			fields++
		}
	}
	if fields != len(seen) {
		t.Errorf("Settings has %d fields, the table %d keys", fields, len(seen))
	}
	for i := range st.NumField() {
		if !st.Field(i).IsExported() {
			continue
		}
		name, _, _ := strings.Cut(st.Field(i).Tag.Get("json"), ",")
		if !seen[name] {
			t.Errorf("field %s (%q) has no key", st.Field(i).Name, name)
		}
	}
}

// TestValueIsTheSettingInEffect: Result.Value gives each set key's value in effect (the
// project's entry over the global one) and false for an unset or undeclared key.
func TestValueIsTheSettingInEffect(t *testing.T) {
	e := newEnv(t)
	writeFile(t, e.globalFile(), `{"logLevel": "debug", "trustedProjects": ["`+e.project+`"]}`)
	writeFile(t, e.projectFile(), `{"logLevel": "error", "truncation": "off"}`)
	r := e.load(t)
	if v, ok := r.Value("logLevel"); !ok || v != "error" {
		t.Errorf("logLevel: %v %v, want the project's error", v, ok)
	}
	if v, ok := r.Value("truncation"); !ok || *v.(*Truncation) != (Truncation{Off: true}) {
		t.Errorf("truncation: %v %v", v, ok)
	}
	if v, ok := r.Value("kernelTransport"); ok || v != nil {
		t.Errorf("unset kernelTransport: %v %v", v, ok)
	}
	if _, ok := r.Value("colour"); ok {
		t.Error("an undeclared key has a value")
	}
}
