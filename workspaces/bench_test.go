package workspaces

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// benchFiles is the size of the benchmark trees: KENNEL_BENCH_FILES, else 10,000 (the
// issue's full size is 100,000).
func benchFiles(b *testing.B) int {
	if v := os.Getenv("KENNEL_BENCH_FILES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			b.Fatalf("KENNEL_BENCH_FILES=%q", v)
		}
		return n
	}
	return 10_000
}

// writeMixed writes n files of mixed sizes under dir, 100 a directory: 80 % up to 4 KiB,
// 18 % up to 32 KiB, 2 % up to 256 KiB (about 7.7 KB on average).
func writeMixed(b *testing.B, dir string, n int) int64 {
	b.Helper()
	sizes := make([]int, n)
	var total int64
	x := uint32(1)
	for i := range sizes {
		x = x*1664525 + 1013904223
		switch r := x >> 8 % 100; {
		case r < 80:
			sizes[i] = int(x>>4) % 4096
		case r < 98:
			sizes[i] = 4096 + int(x>>4)%(28<<10)
		default:
			sizes[i] = 32<<10 + int(x>>4)%(224<<10)
		}
		total += int64(sizes[i])
	}
	buf := make([]byte, 256<<10)
	for i := range buf {
		buf[i] = byte(i*31 + i>>8)
	}
	writeFiles(b, dir, n, "d%04d", "f%06d", func(i int) []byte { return buf[:sizes[i]] })
	unix.Sync()
	return total
}

// BenchmarkCreate times Create of a tree of mixed sizes against cp -a of the same tree on
// the same file system: on ext4 (the test's temporary directory) a byte copy, on XFS
// (a loop device made here) with --reflink=always. Create copies each file once and
// keeps a base (a digest, or a second copy); cp copies once.
//
// Each side runs with the tree's bytes in the page cache ("warm": read just before, with
// the timer stopped, as a parent agent's working tree is) and, on XFS, with every cache
// dropped ("cold": /proc/sys/vm/drop_caches, as root): a cold file's base is a clone, not
// a digest.
func BenchmarkCreate(b *testing.B) {
	n := benchFiles(b)
	run := func(b *testing.B, root string, temps []string, cpArgs ...string) {
		src := filepath.Join(root, "src")
		bytes := writeMixed(b, src, n)
		state := filepath.Join(root, "state")
		for _, temp := range temps {
			prepare := func(b *testing.B) {
				unix.Sync()
				if temp == "warm" {
					readTreeBytes(b, src)
				} else {
					dropCaches(b)
				}
			}
			b.Run(temp, func(b *testing.B) {
				b.Run("kennel", func(b *testing.B) {
					b.SetBytes(bytes)
					workers, _ := strconv.Atoi(os.Getenv("KENNEL_BENCH_WORKERS"))
					for i := range b.N {
						b.StopTimer()
						prepare(b)
						b.StartTimer()
						res, err := Create(context.Background(), src, CreateOptions{State: state, ID: fmt.Sprint("b", temp, i), Logger: quiet(), Workers: workers})
						if err != nil {
							b.Fatal(err)
						}
						b.StopTimer()
						b.ReportMetric(float64(res.Cloned), "cloned/op")
						b.ReportMetric(float64(res.Digested), "digested/op")
						removeTree(res.Dir)
						b.StartTimer()
					}
				})
				b.Run("cp-a", func(b *testing.B) {
					b.SetBytes(bytes)
					for i := range b.N {
						b.StopTimer()
						prepare(b)
						b.StartTimer()
						dst := filepath.Join(root, fmt.Sprint("cp", temp, i))
						if out, err := exec.Command("cp", append(append([]string{"-a"}, cpArgs...), src, dst)...).CombinedOutput(); err != nil {
							b.Fatalf("cp: %v %s", err, out)
						}
						b.StopTimer()
						removeTree(dst)
						b.StartTimer()
					}
				})
			})
		}
	}
	b.Run("ext4", func(b *testing.B) {
		dir := b.TempDir()
		var st unix.Statfs_t
		if err := unix.Statfs(dir, &st); err != nil || st.Type != unix.EXT4_SUPER_MAGIC {
			b.Skipf("%s is not ext4", dir)
		}
		run(b, dir, []string{"warm"})
	})
	b.Run("xfs", func(b *testing.B) {
		run(b, mountXFS(b, max(1<<30, int64(n)*40<<10)), []string{"warm", "cold"}, "--reflink=always")
	})
}

// readTreeBytes reads every file under root, so that its bytes are in the page cache.
func readTreeBytes(b *testing.B, root string) {
	b.Helper()
	buf := make([]byte, 256<<10)
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		for {
			if _, err := f.Read(buf); err != nil {
				return nil
			}
		}
	})
	if err != nil {
		b.Fatal(err)
	}
}

// dropCaches writes back and drops the page cache, dentries and inodes (root only).
func dropCaches(b *testing.B) {
	b.Helper()
	unix.Sync()
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3"), 0); err != nil {
		b.Fatalf("drop caches (needs root): %v", err)
	}
}

// BenchmarkHandBack times the hand-back of a workspace of mixed sizes where the child
// changed 100 files, against a plain stat walk of the three trees (parent, base, copy;
// the base with every file in it, as CreateOptions.DigestMax -1 makes it).
// HandBack runs with a Sweeper, as the CLI does: the removal of the base and the copy is
// not timed (it runs after HandBack returns; each iteration waits for it with the timer
// stopped, and reports its time as ns-sweep/op).
func BenchmarkHandBack(b *testing.B) {
	n := benchFiles(b)
	root := b.TempDir()
	src := filepath.Join(root, "src")
	writeMixed(b, src, n)
	state := filepath.Join(root, "state")
	runs := 0
	handBack := func(b *testing.B, noSync bool) {
		runs++
		var toRecord, sweep time.Duration
		defer func() {
			b.ReportMetric(float64(toRecord.Nanoseconds())/float64(b.N), "ns-to-record/op")
			b.ReportMetric(float64(sweep.Nanoseconds())/float64(b.N), "ns-sweep/op")
		}()
		for i := range b.N {
			b.StopTimer()
			res, err := Create(context.Background(), src, CreateOptions{State: state, ID: fmt.Sprintf("h%d-%d-%v", runs, i, noSync), Logger: quiet()})
			if err != nil {
				b.Fatal(err)
			}
			for j := range 100 {
				k := j * (n / 100)
				p := filepath.Join(res.Path(), fmt.Sprintf("d%04d", k/100), fmt.Sprintf("f%06d", k))
				if err := os.WriteFile(p, []byte(fmt.Sprint("changed ", runs, i, j)), 0o644); err != nil {
					b.Fatal(err)
				}
			}
			unix.Sync()
			b.StartTimer()
			start := time.Now()
			var sweeper Sweeper
			out, err := HandBack(context.Background(), res.Dir, HandBackOptions{NoSync: noSync, Sweeper: &sweeper, Step: func(name string) error {
				if name == "record" {
					toRecord += time.Since(start)
				}
				return nil
			}})
			if err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			start = time.Now()
			if err := sweeper.Wait(context.Background()); err != nil {
				b.Fatal(err)
			}
			sweep += time.Since(start)
			b.StartTimer()
			if len(out.Taken) != 100 {
				b.Fatalf("taken %d, removed %d, conflicts %d, unchanged %d", len(out.Taken), len(out.Removed), len(out.Conflicts), out.Unchanged)
			}
		}
	}
	b.Run("kennel", func(b *testing.B) { handBack(b, false) })
	b.Run("kennel-nosync", func(b *testing.B) { handBack(b, true) })
	b.Run("statwalk3", func(b *testing.B) {
		runs++
		// The three trees as files: a base with no digests (DigestMax -1).
		res, err := Create(context.Background(), src, CreateOptions{State: state, ID: fmt.Sprint("walk", runs), DigestMax: -1, Logger: quiet()})
		if err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		for range b.N {
			for _, t := range []string{src, res.Base(), res.Path()} {
				err := filepath.WalkDir(t, func(p string, d fs.DirEntry, err error) error {
					if err != nil {
						return err
					}
					_, err = d.Info()
					return err
				})
				if err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}
