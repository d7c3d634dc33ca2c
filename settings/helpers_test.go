package settings

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// env is a global config dir and a project dir, fresh for one test.
type env struct {
	global  string // the global config dir
	project string // the project's root
}

func newEnv(t testing.TB) env {
	t.Helper()
	root := t.TempDir()
	e := env{global: filepath.Join(root, "config"), project: filepath.Join(root, "project")}
	if err := os.MkdirAll(e.project, 0o700); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e env) globalFile() string { return filepath.Join(e.global, FileName) }
func (e env) projectFile() string {
	return filepath.Join(e.project, ProjectDirName, FileName)
}

func writeFile(t testing.TB, file, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

func (e env) load(t testing.TB) *Result {
	t.Helper()
	r, err := Load(LoadOptions{GlobalDir: e.global, ProjectDir: e.project})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// problemsOf lists "file-kind pointer class" of each problem, for comparing.
func problemsOf(e env, r *Result) []string {
	var out []string
	for _, p := range r.Problems {
		which := "global"
		if p.File == e.projectFile() {
			which = "project"
		}
		class := "?"
		for _, c := range []struct {
			name string
			err  error
		}{{"bad", ErrBadValue}, {"undeclared", ErrUndeclared}, {"unreadable", ErrUnreadable}, {"withheld", ErrWithheld}} {
			if errors.Is(p, c.err) {
				class = c.name
			}
		}
		out = append(out, which+" "+p.Pointer+" "+class)
	}
	slices.Sort(out)
	return out
}
