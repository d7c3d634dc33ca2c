package main

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kennel-dev/kennel/internal/testneed"
	"github.com/kennel-dev/kennel/settings"
	"github.com/kennel-dev/kennel/workspaces"
)

// BenchmarkRunStart times `kennel run -c 1+1` (a process start to its exit) with python3
// found on PATH behind a pyenv shim against the same command with the resolved
// interpreter given directly (kernelTransport.python), each with the interpreter cache
// warm, and both again with the cache unusable (its directory open to others, so every
// start asks the interpreter: the behaviour before the cache). The four run in turn
// within each iteration, so load changes hit all of them; reported are the medians
// (ms-*), the ratios shim/direct, and the median of each iteration's shim/direct.
func BenchmarkRunStart(b *testing.B) {
	shim, err := exec.LookPath("python3")
	if err != nil {
		testneed.Missing(b, "python3 on PATH", err)
	}
	head := make([]byte, 2)
	if f, err := os.Open(shim); err == nil {
		io.ReadFull(f, head)
		f.Close()
	}
	testneed.Need(b, string(head) == "#!", "python3 on PATH as a shim (a script, as pyenv's is): "+shim)
	real := testneed.Python(b)

	root := b.TempDir()
	noConfig, direct := filepath.Join(root, "config-none"), filepath.Join(root, "config-direct")
	for _, d := range []string{noConfig, direct} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			b.Fatal(err)
		}
	}
	doc := fmt.Sprintf(`{"kernelTransport": {"local": {}, "python": %q}}`, real)
	if err := os.WriteFile(filepath.Join(direct, "settings.json"), []byte(doc), 0o600); err != nil {
		b.Fatal(err)
	}
	warm, open := filepath.Join(root, "cache-warm"), filepath.Join(root, "cache-open")
	if err := os.MkdirAll(filepath.Join(open, "kennel", "python"), 0o700); err != nil {
		b.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(open, "kennel", "python"), 0o755); err != nil {
		b.Fatal(err)
	}
	work := b.TempDir()
	type variant struct {
		name, bin, config, cache string
		times                    []time.Duration
	}
	vs := []*variant{
		{name: "shim", config: noConfig, cache: warm},
		{name: "direct", config: direct, cache: warm},
		{name: "shim-probe", config: noConfig, cache: open},
		{name: "direct-probe", config: direct, cache: open},
	}
	if old := oldKennel(b); old != "" {
		vs = append(vs, &variant{name: "shim-old", bin: old, config: noConfig, cache: warm}, &variant{name: "direct-old", bin: old, config: direct, cache: warm})
	}
	run := func(v *variant) time.Duration {
		cmd := exec.Command(cmp.Or(v.bin, os.Args[0]), "run", "-c", "1+1")
		cmd.Dir = work
		cmd.Env = append(os.Environ(), envRunMain+"=1", "XDG_CACHE_HOME="+v.cache, settings.EnvConfigDir+"="+v.config)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		start := time.Now()
		err := cmd.Run()
		d := time.Since(start)
		if err != nil || out.String() != "2\n" {
			b.Fatalf("%s: %v, stdout %q, stderr %q", v.name, err, out.String(), errb.String())
		}
		return d
	}
	for _, v := range vs {
		run(v) // unpack the bundle, fill the cache
	}
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		for j := range vs {
			v := vs[(i+j)%len(vs)]
			v.times = append(v.times, run(v))
		}
	}
	b.StopTimer()
	med := map[string]float64{}
	for _, v := range vs {
		med[v.name] = medianMS(v.times)
		b.ReportMetric(med[v.name], "ms-"+v.name)
	}
	b.ReportMetric(med["shim"]/med["direct"], "shim/direct")
	// The median of each iteration's own ratio: steadier when the load moves.
	paired := make([]time.Duration, len(vs[0].times))
	for i := range paired {
		paired[i] = time.Duration(float64(time.Millisecond) * float64(vs[0].times[i]) / float64(vs[1].times[i]))
	}
	b.ReportMetric(medianMS(paired), "shim/direct-paired")
	b.ReportMetric(med["shim-probe"]/med["direct"], "shim-probe/direct")
	if med["direct-old"] > 0 {
		b.ReportMetric(med["shim-old"]/med["direct-old"], "shim-old/direct-old")
	}
	b.ReportMetric(0, "ns/op")
}

// oldKennel is KENNEL_BENCH_OLD: another build of kennel (an earlier commit's) that the
// benchmarks run beside this one, or "".
func oldKennel(b *testing.B) string {
	p := os.Getenv("KENNEL_BENCH_OLD")
	if p == "" {
		return ""
	}
	if _, err := exec.LookPath(p); err != nil {
		b.Fatalf("KENNEL_BENCH_OLD: %v", err)
	}
	return p
}

// medianMS is the median of ds in milliseconds.
func medianMS(ds []time.Duration) float64 {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	if len(s) == 0 {
		return 0
	}
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return float64(m) / float64(time.Millisecond)
}

// BenchmarkWorkspaceHandback times `kennel workspace handback CHILD` (a process start to
// its exit, its output read to EOF) on a workspace of a git repository of
// KENNEL_BENCH_FILES files (default 13,000, generated here) where the child changed one
// file, against a stat walk (lstat of every entry) of the parent and the child's copy,
// in the same iteration. Reported: the medians (ms-handback, ms-statwalk), their ratio,
// and how long after the command's start the detached removal of the base and the copy
// was done (ms-removed, polled every 10 ms).
func BenchmarkWorkspaceHandback(b *testing.B) {
	testneed.Tool(b, "git")
	n := 13_000
	if v := os.Getenv("KENNEL_BENCH_FILES"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n <= 0 {
			b.Fatalf("KENNEL_BENCH_FILES=%q", v)
		}
	}
	root := b.TempDir()
	repo := filepath.Join(root, "repo")
	writeRepo(b, repo, n)
	state := filepath.Join(root, "state")
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	old := oldKennel(b)
	var handbacks, walks, removed, olds []time.Duration
	// prepare makes a workspace whose child changed one file, its bytes on disk (as a
	// child's are by the time it is done).
	prepare := func(id string) *workspaces.Workspace {
		res, err := workspaces.Create(context.Background(), repo, workspaces.CreateOptions{State: state, ID: id, Logger: quiet})
		if err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(res.Path(), repoFile(n/2)), []byte("changed "+id+"\n"), 0o644); err != nil {
			b.Fatal(err)
		}
		syscall.Sync()
		return &res.Workspace
	}
	// handBack times bin's handback of ws.
	handBack := func(bin string, ws *workspaces.Workspace) (time.Time, time.Duration) {
		cmd := exec.Command(bin, "workspace", "handback", ws.Path())
		cmd.Env = append(os.Environ(), envRunMain+"=1")
		start := time.Now()
		out, err := cmd.CombinedOutput()
		d := time.Since(start)
		if err != nil || !strings.Contains(string(out), "1 taken, 0 removed, 0 conflicts") {
			b.Fatalf("handback: %v\n%s", err, out)
		}
		return start, d
	}
	timeOld := func(i int) {
		if old == "" {
			return
		}
		b.StopTimer()
		ws := prepare(fmt.Sprint("old", i))
		b.StartTimer()
		_, d := handBack(old, ws)
		olds = append(olds, d)
	}
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if i%2 == 1 {
			timeOld(i)
		}
		b.StopTimer()
		res := prepare(fmt.Sprint("new", i))
		b.StartTimer()
		start := time.Now()
		for _, t := range []string{repo, res.Path()} {
			if err := statWalk(t); err != nil {
				b.Fatal(err)
			}
		}
		walks = append(walks, time.Since(start))
		start, d := handBack(os.Args[0], res)
		handbacks = append(handbacks, d)
		b.StopTimer()
		trash := filepath.Join(res.Dir, "trash")
		for {
			if _, err := os.Lstat(trash); errors.Is(err, fs.ErrNotExist) {
				break
			}
			if time.Since(start) > 5*time.Minute {
				b.Fatalf("%s still there after 5 minutes", trash)
			}
			time.Sleep(10 * time.Millisecond)
		}
		removed = append(removed, time.Since(start))
		b.StartTimer()
		if i%2 == 0 {
			timeOld(i)
		}
	}
	b.StopTimer()
	h, w := medianMS(handbacks), medianMS(walks)
	b.ReportMetric(h, "ms-handback")
	b.ReportMetric(w, "ms-statwalk")
	b.ReportMetric(h/w, "handback/statwalk")
	b.ReportMetric(medianMS(removed), "ms-removed")
	if len(olds) > 0 {
		b.ReportMetric(medianMS(olds), "ms-handback-old")
		b.ReportMetric(medianMS(olds)/w, "old/statwalk")
	}
	b.ReportMetric(0, "ns/op")
}

// statWalk lstats every entry under root.
func statWalk(root string) error {
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		_, err = d.Info()
		return err
	})
}

// writeRepo makes a git repository at dir holding n committed files of mixed sizes
// (mostly a few hundred bytes to a few KiB, as source files are) in two levels of
// directories, 100 files a directory.
func writeRepo(b *testing.B, dir string, n int) {
	b.Helper()
	line := []byte("the quick brown fox jumps over the lazy dog 0123456789\n")
	x := uint32(7)
	for i := range n {
		x = x*1664525 + 1013904223
		lines := 1 + int(x>>8)%80
		if x>>4%50 == 0 {
			lines *= 20
		}
		p := filepath.Join(dir, repoFile(i))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(p, bytes.Repeat(line, lines), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	for _, args := range [][]string{{"init", "-q"}, {"add", "-A"}, {"-c", "user.name=bench", "-c", "user.email=bench@localhost", "commit", "-q", "-m", "tree"}} {
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
}

// repoFile is the relative path of writeRepo's file i.
func repoFile(i int) string {
	return filepath.Join(fmt.Sprintf("d%04d", i/300), fmt.Sprintf("s%d", i/100%3), fmt.Sprintf("f%06d.txt", i))
}
