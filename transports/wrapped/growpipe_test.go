package wrapped

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// growPipe makes the stdin pipe hold a preamble over the default 64 KiB (so it is sent
// in one write), leaves smaller ones at the default, and never asks for more than
// maxPipeGrow.
func TestGrowPipeHoldsThePreamble(t *testing.T) {
	size := func(n int) int {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		defer w.Close()
		growPipe(w, n)
		var got int
		rc, err := w.SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		if err := rc.Control(func(fd uintptr) { got, err = unix.FcntlInt(fd, unix.F_GETPIPE_SZ, 0) }); err != nil {
			t.Fatal(err)
		}
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got, def := size(100), size(0); got != def {
		t.Errorf("pipe for 100 bytes: %d, want the default %d", got, def)
	}
	for _, n := range []int{64<<10 + 1, 70000, 300 << 10} {
		if got := size(n); got < n {
			t.Errorf("pipe for %d bytes holds %d", n, got)
		}
	}
	if got := size(64 << 20); got > maxPipeGrow {
		t.Errorf("pipe for 64 MiB: %d, over %d", got, maxPipeGrow)
	}
}
