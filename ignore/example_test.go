package ignore_test

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing/fstest"

	"github.com/kennel-dev/kennel/ignore"
)

func ExampleWalk() {
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	for name, content := range map[string]string{
		".gitignore":     "*.log\n!keep.log\nbuild/\n",
		"main.py":        "",
		"run.log":        "",
		"keep.log":       "",
		"build/out.o":    "",
		"src/.gitignore": "!debug.log\n",
		"src/debug.log":  "",
		".git/HEAD":      "",
	} {
		p := filepath.Join(dir, filepath.FromSlash(name))
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, []byte(content), 0o644)
	}
	ignore.Walk(context.Background(), dir, func(rel string, d fs.DirEntry) error {
		fmt.Println(rel)
		return nil
	})
	// Output:
	// .gitignore
	// keep.log
	// main.py
	// src
	// src/.gitignore
	// src/debug.log
}

func ExampleWalkFS() {
	fsys := fstest.MapFS{
		".gitignore":     {Data: []byte("*.log\n!keep.log\nbuild/\n")},
		"main.py":        {},
		"run.log":        {},
		"keep.log":       {},
		"build/out.o":    {},
		"src/.gitignore": {Data: []byte("!debug.log\n")},
		"src/debug.log":  {},
	}
	ignore.WalkFS(context.Background(), fsys, ".", func(rel string, d fs.DirEntry) error {
		fmt.Println(rel)
		return nil
	})
	// Output:
	// .gitignore
	// keep.log
	// main.py
	// src
	// src/.gitignore
	// src/debug.log
}
