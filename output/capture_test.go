package output

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"pgregory.net/rapid"

	"github.com/kennel-dev/kennel/internal/testneed"
)

func newCapture(t testing.TB, opts CaptureOptions) *Capture {
	t.Helper()
	c, err := NewCapture(opts)
	if err != nil {
		t.Fatalf("NewCapture: %v", err)
	}
	return c
}

func writeAll(t testing.TB, c *Capture, p []byte) {
	t.Helper()
	if n, err := c.Write(p); n != len(p) || err != nil {
		t.Fatalf("Write(%d bytes) = %d, %v", len(p), n, err)
	}
}

// randomBytes returns n pseudo-random bytes seeded from r.
func randomBytes(r *rand.Rand, n int) []byte {
	var seed [32]byte
	for i := range seed {
		seed[i] = byte(r.Uint32())
	}
	p := make([]byte, n)
	_, _ = rand.NewChaCha8(seed).Read(p)
	return p
}

func readErr(t fataler, err error) *ReadError {
	t.Helper()
	var re *ReadError
	if !errors.As(err, &re) {
		t.Fatalf("error %v is not a *ReadError", err)
	}
	return re
}

// model is what a capture with the given caps must be able to read back after seen bytes.
type model struct{ prefix, tail, spill int64 }

func (m model) readable(seen int64, spillOK bool) (retained, tailFrom int64) {
	retained, tailFrom = min(seen, m.prefix), seen
	if seen > m.prefix {
		if spillOK {
			retained = min(seen, m.spill)
		}
		tailFrom = max(m.prefix, seen-m.tail)
	}
	return retained, tailFrom
}

// TestPropCaptureMatchesModel writes, reads and closes in generated orders against small
// caps, and checks every page against a model of what is retained.
func TestPropCaptureMatchesModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		m := model{
			prefix: rapid.Int64Range(1, 20).Draw(t, "prefix"),
			tail:   rapid.Int64Range(1, 10).Draw(t, "tail"),
			spill:  rapid.Int64Range(1, 60).Draw(t, "spill"),
		}
		m.spill = max(m.spill, m.prefix)
		spill := rapid.Bool().Draw(t, "spill dir")
		opts := CaptureOptions{PrefixBytes: m.prefix, TailBytes: m.tail, SpillLimit: m.spill}
		if spill {
			opts.SpillDir = privateTempDir(t)
		}
		c, err := NewCapture(opts)
		if err != nil {
			t.Fatal(err)
		}
		var data []byte
		closed := false
		for range rapid.IntRange(1, 40).Draw(t, "steps") {
			switch op := rapid.IntRange(0, 9).Draw(t, "op"); {
			case op < 4 && !closed:
				p := []byte(rapid.StringN(0, 30, 30).Draw(t, "write"))
				if n, err := c.Write(p); n != len(p) || err != nil {
					t.Fatalf("Write = %d, %v", n, err)
				}
				data = append(data, p...)
			case op == 4:
				if err := c.Close(); err != nil {
					t.Fatal(err)
				}
				closed = true
				if _, err := c.Write([]byte("x")); !errors.Is(err, ErrClosed) {
					t.Fatalf("write after close = %v", err)
				}
			default:
				seen := int64(len(data))
				off := rapid.Int64Range(0, seen+3).Draw(t, "offset")
				limit := rapid.Int64Range(0, 30).Draw(t, "limit")
				page, err := c.ReadPage(off, limit)
				retained, tailFrom := m.readable(seen, spill)
				end := min(off+limit, seen)
				switch {
				case off > seen && closed:
					if !errors.Is(err, ErrPastEnd) {
						t.Fatalf("read past the end of closed = %v", err)
					}
				case off > seen:
					if err != nil || len(page.Data) != 0 || !page.More || page.EOF {
						t.Fatalf("read past the end of running = %+v, %v", page, err)
					}
				case end <= retained || off >= tailFrom || retained >= tailFrom:
					if err != nil {
						t.Fatalf("ReadPage(%d, %d) of %d (retained %d, tail %d) = %v", off, limit, seen, retained, tailFrom, err)
					}
					if !bytes.Equal(page.Data, data[off:end]) {
						t.Fatalf("ReadPage(%d, %d) = %q, want %q", off, limit, page.Data, data[off:end])
					}
					atEnd := end == seen
					if page.EOF != (atEnd && closed) || page.More != (atEnd && !closed) || page.Seen != seen {
						t.Fatalf("page flags %+v at end=%v closed=%v", page, atEnd, closed)
					}
				default:
					if !errors.Is(err, ErrLost) {
						t.Fatalf("ReadPage(%d, %d) crossing lost bytes = %v, want ErrLost", off, limit, err)
					}
					if use := readErr(t, err).Use; use != nil {
						if _, err := c.ReadPage(use.Offset, use.Limit); err != nil {
							t.Fatalf("the read the error names (%+v) fails: %v", *use, err)
						}
					}
				}
			}
		}
		st := c.Stat()
		if st.Seen != int64(len(data)) {
			t.Fatalf("seen %d, wrote %d", st.Seen, len(data))
		}
	})
}

// TestCapture20MiBPages writes 20 MiB in random chunks while a reader pages at random
// offsets, then checks that the kept prefix and tail read back exactly and that reads
// crossing the lost middle are refused.
func TestCapture20MiBPages(t *testing.T) {
	const total = 20 << 20
	r := rand.New(rand.NewPCG(1, 2))
	src := randomBytes(r, total)
	c := newCapture(t, CaptureOptions{SpillDir: privateTempDir(t)})

	var wg sync.WaitGroup
	stop := make(chan struct{})
	var readerErr error
	wg.Go(func() {
		rr := rand.New(rand.NewPCG(3, 4))
		for reads := 0; ; reads++ {
			select {
			case <-stop:
				if reads == 0 {
					readerErr = errors.New("reader never ran")
				}
				return
			default:
			}
			seen := c.Stat().Seen
			off, limit := rr.Int64N(seen+1), rr.Int64N(MaxPage+1)
			page, err := c.ReadPage(off, limit)
			if err != nil {
				// Only bytes past the spill limit are ever lost.
				if !errors.Is(err, ErrLost) || off+limit <= DefaultSpillLimit {
					readerErr = fmt.Errorf("concurrent read at %d: %v", off, err)
					return
				}
				continue
			}
			if !bytes.Equal(page.Data, src[off:off+int64(len(page.Data))]) {
				readerErr = fmt.Errorf("concurrent read at %d: wrong bytes", off)
				return
			}
		}
	})
	for off := 0; off < total; {
		n := min(1+r.IntN(256<<10), total-off)
		writeAll(t, c, src[off:off+n])
		off += n
	}
	close(stop)
	wg.Wait()
	if readerErr != nil {
		t.Fatal(readerErr)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}

	st := c.Stat()
	if st.Seen != total || st.Retained != DefaultSpillLimit || st.TailFrom != total-DefaultTailBytes || st.Complete {
		t.Fatalf("stat %+v", st)
	}
	for i := 0; i < 2000; i++ {
		off := r.Int64N(total + 1)
		if i%4 == 0 { // aim at the edges of the lost middle
			off = []int64{DefaultSpillLimit - 10, total - DefaultTailBytes - 10, total - DefaultTailBytes, 0}[i/4%4]
		}
		limit := r.Int64N(MaxPage + 1)
		end := min(off+limit, total)
		page, err := c.ReadPage(off, limit)
		if end <= DefaultSpillLimit || off >= total-DefaultTailBytes {
			if err != nil {
				t.Fatalf("ReadPage(%d, %d): %v", off, limit, err)
			}
			if !bytes.Equal(page.Data, src[off:end]) {
				t.Fatalf("ReadPage(%d, %d): wrong bytes", off, limit)
			}
			if page.EOF != (end == total) || page.More {
				t.Fatalf("ReadPage(%d, %d) flags %+v", off, limit, page)
			}
			continue
		}
		if !errors.Is(err, ErrLost) {
			t.Fatalf("ReadPage(%d, %d) across lost output = %v, want ErrLost", off, limit, err)
		}
		if msg := err.Error(); !strings.Contains(msg, "use offset=") {
			t.Fatalf("error %q names no read that works", msg)
		}
		use := readErr(t, err).Use
		page, err = c.ReadPage(use.Offset, use.Limit)
		if err != nil || !bytes.Equal(page.Data, src[use.Offset:use.Offset+use.Limit]) {
			t.Fatalf("the suggested read %+v fails: %v", *use, err)
		}
	}
}

func TestCaptureRefusesPagesOverMax(t *testing.T) {
	c := newCapture(t, CaptureOptions{})
	writeAll(t, c, bytes.Repeat([]byte("x"), 100<<10))
	_, err := c.ReadPage(0, MaxPage+1)
	if !errors.Is(err, ErrPageTooLarge) {
		t.Fatalf("ReadPage(0, 65537) = %v, want ErrPageTooLarge", err)
	}
	if want := "read at most 65536 bytes: use offset=0 limit=65536"; !strings.Contains(err.Error(), want) {
		t.Fatalf("error %q does not say %q", err, want)
	}
	page, err := c.ReadPage(0, MaxPage)
	if err != nil || len(page.Data) != MaxPage || page.More || page.EOF {
		t.Fatalf("ReadPage(0, 65536) = %d bytes, %+v, %v", len(page.Data), page, err)
	}
	if _, err := c.ReadPage(-1, 10); !errors.Is(err, ErrInvalidRange) {
		t.Fatalf("negative offset = %v", err)
	}
}

func TestCaptureEndOfOutput(t *testing.T) {
	c := newCapture(t, CaptureOptions{})
	writeAll(t, c, []byte("hello"))
	page, err := c.ReadPage(2, 10)
	if err != nil || string(page.Data) != "llo" || !page.More || page.EOF {
		t.Fatalf("running read at the end = %+v, %v", page, err)
	}
	page, err = c.ReadPage(9, 10)
	if err != nil || len(page.Data) != 0 || !page.More {
		t.Fatalf("running read past the end = %+v, %v", page, err)
	}
	writeAll(t, c, []byte(" world"))
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	page, err = c.ReadPage(5, 10)
	if err != nil || string(page.Data) != " world" || !page.EOF || page.More {
		t.Fatalf("closed read at the end = %+v, %v", page, err)
	}
	page, err = c.ReadPage(11, 10)
	if err != nil || len(page.Data) != 0 || !page.EOF {
		t.Fatalf("closed read at exactly the end = %+v, %v", page, err)
	}
	if _, err := c.ReadPage(12, 10); !errors.Is(err, ErrPastEnd) {
		t.Fatalf("closed read past the end = %v, want ErrPastEnd", err)
	}
}

func TestCaptureSpillFileIsPrivate(t *testing.T) {
	dir := privateTempDir(t)
	c := newCapture(t, CaptureOptions{SpillDir: dir, PrefixBytes: 10})
	writeAll(t, c, []byte("0123456789"))
	if st := c.Stat(); st.SpillPath != "" || dirLen(t, dir) != 0 {
		t.Fatalf("spilled before passing the prefix: %+v", st)
	}
	writeAll(t, c, []byte("abc"))
	st := c.Stat()
	if filepath.Dir(st.SpillPath) != dir {
		t.Fatalf("spill path %q not in %q", st.SpillPath, dir)
	}
	got, err := readFileMode(st.SpillPath, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != "0123456789abc" {
		t.Fatalf("spill holds %q", got)
	}
}

func TestNewCaptureRefusesSharedDir(t *testing.T) {
	dir := privateTempDir(t)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := NewCapture(CaptureOptions{SpillDir: dir}); !errors.Is(err, ErrNotPrivate) {
		t.Fatalf("NewCapture in a 0755 dir = %v, want ErrNotPrivate", err)
	}
	link := filepath.Join(privateTempDir(t), "link")
	if err := os.Symlink(privateTempDir(t), link); err != nil {
		t.Fatal(err)
	}
	if _, err := NewBounder(Default(), BounderOptions{ArtifactDir: link}); !errors.Is(err, ErrNotPrivate) {
		t.Fatalf("NewBounder in a symlinked dir = %v, want ErrNotPrivate", err)
	}
	if err := PrepareDir(link); !errors.Is(err, ErrNotPrivate) {
		t.Fatalf("PrepareDir(symlink) = %v, want ErrNotPrivate", err)
	}
	fresh := filepath.Join(privateTempDir(t), "a", "b")
	if err := PrepareDir(fresh); err != nil {
		t.Fatalf("PrepareDir(new) = %v", err)
	}
	if fi, err := os.Stat(fresh); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("PrepareDir made %v, %v", fi.Mode(), err)
	}
}

// TestCapturesCheckOnceAndAtSpill: NewCaptures refuses what NewCapture refuses; New makes
// open captures without a check of its own; a spill directory that is no longer private
// when a capture spills fails the spill (recorded, no file), and the output stays in
// memory as far as it is retained.
func TestCapturesCheckOnceAndAtSpill(t *testing.T) {
	shared := privateTempDir(t)
	if err := os.Chmod(shared, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := NewCaptures(CaptureOptions{SpillDir: shared}); !errors.Is(err, ErrNotPrivate) {
		t.Fatalf("NewCaptures in a 0755 dir = %v, want ErrNotPrivate", err)
	}
	if _, err := NewCaptures(CaptureOptions{TailBytes: -1}); !errors.Is(err, ErrInvalidRange) {
		t.Fatalf("NewCaptures with a negative tail = %v, want ErrInvalidRange", err)
	}

	dir := privateTempDir(t)
	m, err := NewCaptures(CaptureOptions{SpillDir: dir, PrefixBytes: 4, TailBytes: 4})
	if err != nil {
		t.Fatal(err)
	}
	ok := m.New()
	writeAll(t, ok, []byte("0123456789"))
	if st := ok.Stat(); st.SpillErr != nil || st.SpillPath == "" || st.Retained != 10 {
		t.Fatalf("capture in a private dir: %+v", st)
	}

	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	late := m.New()
	writeAll(t, late, []byte("0123"))
	if st := late.Stat(); st.SpillErr != nil || st.Seen != 4 {
		t.Fatalf("capture within its prefix: %+v", st)
	}
	writeAll(t, late, []byte("456789"))
	st := late.Stat()
	if !errors.Is(st.SpillErr, ErrNotPrivate) || st.SpillPath != "" || st.Retained != 4 || st.TailFrom != 6 || st.Seen != 10 {
		t.Fatalf("capture spilling into a dir made shared: %+v, want a not-private spill failure", st)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Fatalf("dir holds %d files, want only the first capture's spill", len(entries))
	}
}

// filledCapture fills a capture of n random bytes with a spill, and returns it closed or not.
func filledCapture(t *testing.T, n int, closed bool) (*Capture, []byte) {
	t.Helper()
	src := randomBytes(rand.New(rand.NewPCG(uint64(n), 9)), n)
	c := newCapture(t, CaptureOptions{SpillDir: privateTempDir(t)})
	for off := 0; off < n; off += 50_000 {
		writeAll(t, c, src[off:min(off+50_000, n)])
	}
	if closed {
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return c, src
}

// checkUntouched checks that dst still holds old and that dst's directory holds nothing
// but dst.
func checkUntouched(t *testing.T, dst string, old []byte) {
	t.Helper()
	got, err := os.ReadFile(dst)
	if err != nil || !bytes.Equal(got, old) {
		t.Fatalf("destination changed: %q, %v", got, err)
	}
	if n := dirLen(t, filepath.Dir(dst)); n != 1 {
		t.Fatalf("%d files beside the destination, want 1 (a temporary file was left)", n)
	}
}

func TestCaptureSaveRefusesRunning(t *testing.T) {
	c, _ := filledCapture(t, 3<<20, false)
	dst := filepath.Join(t.TempDir(), "out.bin")
	if err := os.WriteFile(dst, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := c.Save(context.Background(), dst)
	if !errors.Is(err, ErrRunning) {
		t.Fatalf("Save of a running capture = %v, want ErrRunning", err)
	}
	checkUntouched(t, dst, []byte("old"))
}

func TestCaptureSaveAfterCloseIsExact(t *testing.T) {
	for _, n := range []int{0, 1000, 5 << 20, DefaultSpillLimit} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			c, src := filledCapture(t, n, true)
			dst := filepath.Join(t.TempDir(), "out.bin")
			if err := os.WriteFile(dst, []byte("old"), 0o644); err != nil {
				t.Fatal(err)
			}
			abs, err := c.Save(context.Background(), dst)
			if err != nil || abs != dst {
				t.Fatalf("Save = %q, %v", abs, err)
			}
			got, err := os.ReadFile(dst)
			if err != nil || !bytes.Equal(got, src) {
				t.Fatalf("saved %d bytes, want %d exact (%v)", len(got), len(src), err)
			}
			if n := dirLen(t, filepath.Dir(dst)); n != 1 {
				t.Fatalf("%d files beside the destination", n)
			}
		})
	}
}

func TestCaptureSaveRefusesLostOutput(t *testing.T) {
	c, _ := filledCapture(t, DefaultSpillLimit+DefaultTailBytes+1, true)
	dst := filepath.Join(t.TempDir(), "out.bin")
	if err := os.WriteFile(dst, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := c.Save(context.Background(), dst)
	if !errors.Is(err, ErrLost) || !strings.Contains(err.Error(), "use offset=0 limit=65536") {
		t.Fatalf("Save of lost output = %v, want ErrLost naming a page", err)
	}
	checkUntouched(t, dst, []byte("old"))
}

func TestCaptureSaveCanceled(t *testing.T) {
	c, _ := filledCapture(t, 2<<20, true)
	dst := filepath.Join(t.TempDir(), "out.bin")
	if err := os.WriteFile(dst, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.Save(ctx, dst); !errors.Is(err, context.Canceled) {
		t.Fatalf("Save with a canceled context = %v", err)
	}
	checkUntouched(t, dst, []byte("old"))
}

// TestCaptureSpillMissingOrShortened removes and then shortens the spill file of a closed
// capture: reads and saves past the prefix refuse visibly.
func TestCaptureSpillMissingOrShortened(t *testing.T) {
	for _, damage := range []string{"remove", "truncate"} {
		t.Run(damage, func(t *testing.T) {
			c, src := filledCapture(t, 3<<20, true)
			path := c.Stat().SpillPath
			var err error
			if damage == "remove" {
				err = os.Remove(path)
			} else {
				err = os.Truncate(path, DefaultPrefixBytes+100)
			}
			if err != nil {
				t.Fatal(err)
			}
			if page, err := c.ReadPage(0, MaxPage); err != nil || !bytes.Equal(page.Data, src[:MaxPage]) {
				t.Fatalf("prefix read = %v", err)
			}
			if _, err := c.ReadPage(2<<20, 100); !errors.Is(err, ErrSpillLost) {
				t.Fatalf("read from a damaged spill = %v, want ErrSpillLost", err)
			}
			dst := filepath.Join(t.TempDir(), "out.bin")
			if err := os.WriteFile(dst, []byte("old"), 0o644); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Save(context.Background(), dst); !errors.Is(err, ErrSpillLost) {
				t.Fatalf("Save from a damaged spill = %v, want ErrSpillLost", err)
			}
			checkUntouched(t, dst, []byte("old"))
		})
	}
}

// TestCaptureSpillCreateFails removes the spill directory before the output passes the
// prefix: writing goes on, the prefix and tail stay readable, the rest refuses.
func TestCaptureSpillCreateFails(t *testing.T) {
	dir := privateTempDir(t)
	c := newCapture(t, CaptureOptions{SpillDir: dir, PrefixBytes: 100, TailBytes: 10})
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	src := bytes.Repeat([]byte("0123456789"), 30)
	writeAll(t, c, src)
	checkSpillFailed(t, c, src, 100, 10)
}

// TestCaptureSpillWriteFails fills a 1 MiB tmpfs under the spill: the writer goes on, and
// pages past the prefix (except the tail) refuse with the spill's error.
func TestCaptureSpillWriteFails(t *testing.T) {
	dir := privateTempDir(t)
	testneed.Root(t) // to mount a tmpfs
	if out, err := runCmd("mount", "-t", "tmpfs", "-o", "size=1m,mode=0700", "tmpfs", dir); err != nil {
		testneed.Missing(t, "mount -t tmpfs", fmt.Errorf("%w: %s", err, out))
	}
	t.Cleanup(func() { runCmd("umount", dir) })
	c := newCapture(t, CaptureOptions{SpillDir: dir, PrefixBytes: 64 << 10, TailBytes: 4096})
	src := randomBytes(rand.New(rand.NewPCG(5, 6)), 3<<20)
	for off := 0; off < len(src); off += 32 << 10 {
		writeAll(t, c, src[off:off+32<<10])
	}
	checkSpillFailed(t, c, src, 64<<10, 4096)
	if n := dirLen(t, dir); n != 0 {
		t.Fatalf("a failed spill left %d files", n)
	}
}

func checkSpillFailed(t *testing.T, c *Capture, src []byte, prefix, tail int64) {
	t.Helper()
	st := c.Stat()
	if st.SpillErr == nil || st.SpillPath != "" || st.Seen != int64(len(src)) || st.Retained != prefix {
		t.Fatalf("stat after a spill failure: %+v", st)
	}
	seen := int64(len(src))
	if page, err := c.ReadPage(0, prefix); err != nil || !bytes.Equal(page.Data, src[:prefix]) {
		t.Fatalf("prefix read = %v", err)
	}
	if page, err := c.ReadPage(seen-tail, tail); err != nil || !bytes.Equal(page.Data, src[seen-tail:]) {
		t.Fatalf("tail read = %v", err)
	}
	_, err := c.ReadPage(prefix-1, 2)
	if !errors.Is(err, ErrLost) || !strings.Contains(err.Error(), "spill failed") {
		t.Fatalf("read past the prefix after a spill failure = %v, want ErrLost naming the spill", err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Save(context.Background(), filepath.Join(t.TempDir(), "x")); !errors.Is(err, ErrLost) {
		t.Fatalf("Save after a spill failure = %v, want ErrLost", err)
	}
}

// TestCaptureHeapBounded writes 256 MiB through a Capture: the heap stays under 32 MiB.
func TestCaptureHeapBounded(t *testing.T) {
	c := newCapture(t, CaptureOptions{SpillDir: privateTempDir(t)})
	chunk := randomBytes(rand.New(rand.NewPCG(7, 8)), 64<<10)
	var peak uint64
	for i := 0; i < (256<<20)/len(chunk); i++ {
		writeAll(t, c, chunk)
		if i%512 == 0 {
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapInuse)
		}
	}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	peak = max(peak, ms.HeapInuse)
	if st := c.Stat(); st.Seen != 256<<20 {
		t.Fatalf("seen %d", st.Seen)
	}
	t.Logf("heap in use after 256 MiB: %d KiB (peak sampled %d KiB)", ms.HeapInuse>>10, peak>>10)
	if ms.HeapInuse >= 32<<20 || peak >= 32<<20 {
		t.Fatalf("heap in use %d MiB (peak %d MiB), want under 32 MiB", ms.HeapInuse>>20, peak>>20)
	}
	runtime.KeepAlive(c)
}

func TestCaptureConcurrentWriters(t *testing.T) {
	c := newCapture(t, CaptureOptions{SpillDir: privateTempDir(t), PrefixBytes: 1000, TailBytes: 100})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := 0; i < 500; i++ {
				writeAll(t, c, []byte{byte('a' + w), byte('a' + w)})
			}
		})
	}
	wg.Go(func() {
		for i := 0; i < 500; i++ {
			if _, err := c.ReadPage(int64(i), 50); err != nil && !errors.Is(err, ErrLost) {
				t.Errorf("read: %v", err)
			}
		}
	})
	wg.Wait()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	// Writes are applied whole: every 2-byte write stays adjacent.
	var all []byte
	for off := int64(0); ; {
		page, err := c.ReadPage(off, MaxPage)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, page.Data...)
		off += int64(len(page.Data))
		if page.EOF {
			break
		}
	}
	if len(all) != 4000 {
		t.Fatalf("read back %d bytes", len(all))
	}
	for i := 0; i < len(all); i += 2 {
		if all[i] != all[i+1] {
			t.Fatalf("write torn at %d", i)
		}
	}
}

// A ReadError's text is its Detail when it has one: its Err is then not asked (nor
// needed), and without a Detail it is the class's.
func TestReadErrorTextWithDetailNeedsNoClass(t *testing.T) {
	e := &ReadError{Op: "read", Offset: 1, Limit: 2, Detail: "bytes 0..1 were not retained", Use: &Span{Offset: 3, Limit: 4}}
	if got, want := e.Error(), "read offset=1 limit=2: bytes 0..1 were not retained: use offset=3 limit=4"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	e = &ReadError{Op: "read", Offset: 1, Limit: 2, Err: ErrPastEnd}
	if got, want := e.Error(), "read offset=1 limit=2: "+ErrPastEnd.Error(); got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}
