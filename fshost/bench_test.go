package fshost

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/kennel-dev/kennel/internal/testneed"
	"github.com/kennel-dev/kennel/pathmap"
)

// benchServer is a Server over a fresh directory mounted at /work, with no bounds.
func benchServer(b *testing.B, opts Options) (*Server, string) {
	b.Helper()
	dir, err := filepath.EvalSymlinks(b.TempDir())
	must(b, err)
	m, err := pathmap.New(pathmap.Config{Dir: dir, Mounts: []pathmap.Mount{{Sandbox: "/work", Host: dir}}})
	must(b, err)
	b.Cleanup(func() { m.Close() })
	return New(m, opts), dir
}

// textFile writes a text file of about size bytes in lines of 40 to 120 characters.
func textFile(b *testing.B, p string, size int) {
	b.Helper()
	r := rand.New(rand.NewPCG(1, 2))
	var sb strings.Builder
	for sb.Len() < size {
		n := 40 + r.IntN(80)
		for range n {
			sb.WriteByte(byte('a' + r.IntN(26)))
		}
		sb.WriteByte('\n')
	}
	must(b, os.WriteFile(p, []byte(sb.String()[:size-1]+"\n"), 0o644))
}

// BenchmarkRead1MiB: fs.read of a whole 1 MiB text file through Serve (arguments
// decoded, path mapped and checked, file opened beneath the mount root, UTF-8 checked,
// lines counted). Compare with BenchmarkRead1MiBOSReadFile.
func BenchmarkRead1MiB(b *testing.B) {
	s, dir := benchServer(b, Options{ReadMaxBytes: -1, ReadMaxLines: -1})
	textFile(b, dir+"/big.txt", 1<<20)
	args := json.RawMessage(`{"path": "big.txt", "cwd": "/work"}`)
	ctx := context.Background()
	b.SetBytes(1 << 20)
	b.ReportAllocs()
	cpu := startCPU(false)
	for b.Loop() {
		res, err := s.Serve(ctx, TypeRead, args)
		if err != nil || len(res.(*ReadResult).Content) != 1<<20 {
			b.Fatalf("fs.read: %v", err)
		}
	}
	cpu.report(b)
}

// BenchmarkRead1MiBOSReadFile is the baseline of BenchmarkRead1MiB: os.ReadFile of the
// same file by its host path, nothing checked.
func BenchmarkRead1MiBOSReadFile(b *testing.B) {
	dir := b.TempDir()
	textFile(b, dir+"/big.txt", 1<<20)
	b.SetBytes(1 << 20)
	b.ReportAllocs()
	cpu := startCPU(false)
	for b.Loop() {
		data, err := os.ReadFile(dir + "/big.txt")
		if err != nil || len(data) != 1<<20 {
			b.Fatal(err)
		}
	}
	cpu.report(b)
}

// grepPattern is the pattern both grep benchmarks search for: a regexp with a required
// literal, as code searches usually have.
const grepPattern = `func [A-Z][a-zA-Z]*Handler\(`

// grepTree10k writes 10,000 source-like files (100 directories of 100, 1-3 KiB each);
// one file in 50 holds a match.
func grepTree10k(b *testing.B, dir string) {
	b.Helper()
	r := rand.New(rand.NewPCG(3, 4))
	words := []string{"func", "return", "if", "err", "nil", "value", "handler", "context", "string", "int", "for", "range", "Handle"}
	for d := range 100 {
		sub := filepath.Join(dir, fmt.Sprintf("pkg%02d", d))
		must(b, os.MkdirAll(sub, 0o755))
		for f := range 100 {
			var sb strings.Builder
			size := 1024 + r.IntN(2048)
			for sb.Len() < size {
				n := 3 + r.IntN(8)
				for i := range n {
					if i > 0 {
						sb.WriteByte(' ')
					}
					sb.WriteString(words[r.IntN(len(words))])
				}
				sb.WriteByte('\n')
			}
			if (d*100+f)%50 == 0 {
				sb.WriteString("func ServeHandler(w http.ResponseWriter) {\n")
			}
			must(b, os.WriteFile(filepath.Join(sub, fmt.Sprintf("f%03d.go", f)), []byte(sb.String()), 0o644))
		}
	}
}

// BenchmarkGrep10k: fs.grep over a 10,000-file tree (ignore.Walk, files opened beneath
// the mount root, searched by the worker pool). Compare with BenchmarkGrep10kGrepRE.
func BenchmarkGrep10k(b *testing.B) {
	s, dir := benchServer(b, Options{})
	grepTree10k(b, dir)
	args := json.RawMessage(`{"pattern": ` + strconvQuote(grepPattern) + `, "cwd": "/work"}`)
	ctx := context.Background()
	cpu := startCPU(false)
	for b.Loop() {
		res, err := s.Serve(ctx, TypeGrep, args)
		if err != nil {
			b.Fatal(err)
		}
		if r := res.(*GrepResult); len(r.Matches) != 200 || r.Files != 10000 {
			b.Fatalf("%d matches in %d files", len(r.Matches), r.Files)
		}
	}
	cpu.report(b)
}

// BenchmarkGrep10kGrepRE is the baseline of BenchmarkGrep10k: `grep -rE` exec'd over
// the same tree with the same pattern, its output read and discarded.
func BenchmarkGrep10kGrepRE(b *testing.B) {
	grep := testneed.Tool(b, "grep")
	dir := b.TempDir()
	grepTree10k(b, dir)
	cpu := startCPU(true)
	for b.Loop() {
		cmd := exec.Command(grep, "-rE", grepPattern, dir)
		cmd.Stdout = io.Discard
		if err := cmd.Run(); err != nil {
			b.Fatal(err)
		}
	}
	cpu.report(b)
}

func strconvQuote(s string) string {
	q, _ := json.Marshal(s)
	return string(q)
}

// cpuMeter reports the CPU time (user + system) a benchmark's loop used, per op, as the
// metric cpu-ns/op: on this shared machine wall time varies with the load, CPU time much
// less. children adds the CPU time of exec'd children (the grep baseline).
type cpuMeter struct {
	start    int64
	children bool
}

func startCPU(children bool) cpuMeter {
	return cpuMeter{start: cpuNow(children), children: children}
}

func (c cpuMeter) report(b *testing.B) {
	b.ReportMetric(float64(cpuNow(c.children)-c.start)/float64(b.N), "cpu-ns/op")
}

func cpuNow(children bool) int64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	n := ru.Utime.Nano() + ru.Stime.Nano()
	if children {
		syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru)
		n += ru.Utime.Nano() + ru.Stime.Nano()
	}
	return n
}
