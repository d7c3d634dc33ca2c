package ignore

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// buildBenchTree makes a tree of 10,000 files (20 directories of 10
// subdirectories of 50 files, a tenth of them *.log), with a root
// .gitignore and one per top directory. With b.Loop a benchmark function
// runs once per -count, so this setup is not repeated per round.
func buildBenchTree(b *testing.B) string {
	b.Helper()
	dir := b.TempDir()
	must := func(err error) {
		if err != nil {
			b.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(dir, ".gitignore"), []byte("*.log\n!keep.log\nbuild/\n/tmp\n**/cache/\n"), 0o644))
	for i := range 20 {
		top := filepath.Join(dir, fmt.Sprintf("d%02d", i))
		must(os.MkdirAll(top, 0o755))
		must(os.WriteFile(filepath.Join(top, ".gitignore"), []byte("*.o\n!main.o\n"), 0o644))
		for j := range 10 {
			sub := filepath.Join(top, fmt.Sprintf("s%d", j))
			must(os.MkdirAll(sub, 0o755))
			for k := range 50 {
				name := fmt.Sprintf("file%02d.txt", k)
				if k%10 == 0 {
					name = fmt.Sprintf("file%02d.log", k)
				}
				must(os.WriteFile(filepath.Join(sub, name), nil, 0o644))
			}
		}
	}
	return dir
}

// BenchmarkWalk10k walks the 10,000-file tree with Walk (gitignore rules
// applied); compare with BenchmarkFilepathWalkDir10k.
func BenchmarkWalk10k(b *testing.B) {
	dir := buildBenchTree(b)
	ctx := context.Background()
	n := 0
	b.ReportAllocs()
	for b.Loop() {
		n = 0
		err := Walk(ctx, dir, func(rel string, d fs.DirEntry) error {
			n++
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(n), "entries")
}

// BenchmarkWalkFS10k walks the same tree with WalkFS over os.DirFS: the
// same rules, names resolved by path instead of descriptors.
func BenchmarkWalkFS10k(b *testing.B) {
	dir := buildBenchTree(b)
	fsys := os.DirFS(dir)
	ctx := context.Background()
	n := 0
	b.ReportAllocs()
	for b.Loop() {
		n = 0
		err := WalkFS(ctx, fsys, ".", func(rel string, d fs.DirEntry) error {
			n++
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(n), "entries")
}

// BenchmarkFilepathWalkDir10k is the baseline: a plain filepath.WalkDir of
// the same tree, no ignore rules.
func BenchmarkFilepathWalkDir10k(b *testing.B) {
	dir := buildBenchTree(b)
	n := 0
	b.ReportAllocs()
	for b.Loop() {
		n = 0
		err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			n++
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(n), "entries")
}
